"""paddledist.hub against a real HTTP server on 127.0.0.1: one download per machine, atomic, cached, and
one-line errors for offline, HTTP errors and cut-off transfers."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddledist import hub
from paddledist.errors import UserError
from helpers.common import free_port
from helpers.weight_server import WeightServer

REPO = Path(__file__).resolve().parent.parent
DATA = os.urandom(300_000)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.unit
def test_local_paths_pass_through_untouched():
    assert hub.resolve("/some/where/w.pdparams", "Train.pretrain_weight_path") == "/some/where/w.pdparams"


@pytest.mark.unit
def test_download_once_then_reuse_without_asking_the_server(cache):
    with WeightServer({"/w.pdparams": DATA}) as server:
        out = io.StringIO()
        path = hub.resolve(server.url("/w.pdparams"), "Train.pretrain_weight_path", out=out)
        assert Path(path).read_bytes() == DATA and Path(path).parent == cache / "downloads"
        assert path.endswith("-w.pdparams") and "downloaded " + server.url("/w.pdparams") in out.getvalue()
        assert hub.resolve(server.url("/w.pdparams"), "k") == path
        assert server.requests == ["/w.pdparams"]
    assert [p.name for p in (cache / "downloads").iterdir() if p.name.startswith(".download-")] == []


@pytest.mark.unit
def test_dry_run_downloads_nothing(cache):
    with WeightServer({"/w.pdparams": DATA}) as server:
        out = io.StringIO()
        path = hub.resolve(server.url("/w.pdparams"), "Train.pretrain_weight_path", dry_run=True, out=out)
        assert server.requests == [] and not os.path.exists(path)
        assert f"would download {server.url('/w.pdparams')} -> {path}" in out.getvalue()


@pytest.mark.multiproc
def test_concurrent_processes_download_once(cache):
    """Four processes resolve the same URL at once over a slow transfer: one request, four equal files."""
    with WeightServer({"/w.pdparams": DATA}, chunk_delay_s=0.05) as server:
        code = ("import sys; from paddledist import hub; "
                "print(hub.resolve(sys.argv[1], 'k'))")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        procs = [subprocess.Popen([sys.executable, "-c", code, server.url("/w.pdparams")], env=env,
                                  stdout=subprocess.PIPE, text=True) for _ in range(4)]
        paths = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert server.requests == ["/w.pdparams"]
    assert len(paths) == 1 and Path(paths.pop()).read_bytes() == DATA


@pytest.mark.unit
def test_http_error_is_one_line_naming_url_and_local_file_option():
    with WeightServer({}) as server:
        url = server.url("/missing.pdparams")
        with pytest.raises(UserError) as e:
            hub.resolve(url, "Train.pretrain_weight_path")
    msg = str(e.value)
    assert "\n" not in msg and url in msg and "HTTP 404" in msg and "-o Train.pretrain_weight_path=" in msg


@pytest.mark.unit
def test_offline_is_one_line_and_leaves_nothing(cache):
    url = f"http://127.0.0.1:{free_port()}/w.pdparams"
    with pytest.raises(UserError) as e:
        hub.resolve(url, "Evaluate.weight_path")
    assert url in str(e.value) and "-o Evaluate.weight_path=" in str(e.value)
    assert not os.path.exists(hub.cached_path(url))


@pytest.mark.unit
def test_cut_off_transfer_leaves_no_file_under_the_final_name(cache):
    with WeightServer({"/w.pdparams": DATA}, truncate=True) as server:
        url = server.url("/w.pdparams")
        with pytest.raises(UserError, match="transfer ended after"):
            hub.resolve(url, "k")
    assert not os.path.exists(hub.cached_path(url))
    assert [p for p in (cache / "downloads").iterdir() if p.name.startswith(".download-")] == []


@pytest.mark.unit
def test_cache_key_separates_same_name_on_different_servers():
    assert hub.cached_path("http://a/x/w.pdparams") != hub.cached_path("http://b/x/w.pdparams")
    assert hub.cached_path("https://a/x/w.pdparams?sig=1").endswith("-w.pdparams")

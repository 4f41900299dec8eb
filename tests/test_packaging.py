"""Packaging: every package folder is a package (a wheel built by find_packages keeps it), the packaged default
config and data resolve, a leading mode word works, workers run the package's own entry, setup.py's cpu
extra is the supported paddle range and no other requirement names paddle. The installed wheel itself trains in
.ci/wheel."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paddledist import bundled, cli, paddle_version
from paddledist.errors import UserError
from paddledist.stages import WORKER_SCRIPT

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.unit
def test_every_package_folder_has_an_init():
    folders = [d for d, _, files in os.walk(REPO / "paddledist") if any(f.endswith(".py") for f in files)]
    missing = [d for d in folders if not os.path.isfile(os.path.join(d, "__init__.py"))]
    assert folders and not missing


@pytest.mark.unit
def test_packaged_default_config_and_its_dataset_resolve_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, overrides = cli.resolve_config("image_classification")
    assert os.path.isfile(path) and bundled.is_bundled(path)
    assert overrides == [f"Global.dataset_dir={bundled.root()}{os.sep}dataset{os.sep}digits"]
    assert os.path.isfile(os.path.join(bundled.root(), "dataset", "digits", "train.txt"))
    assert cli.resolve_config(str(REPO / "tests" / "data" / "paddlex_cls.yaml"))[1] == []
    monkeypatch.chdir(REPO)  # where ./dataset/digits exists, the config means it as written
    assert cli.resolve_config("configs/image_classification.yaml")[1] == []


@pytest.mark.unit
def test_a_leading_mode_word_is_the_mode():
    assert cli.split_mode(["train", "-c", "x"], None) == (["-c", "x"], "train")
    assert cli.split_mode(["-c", "train"], None) == (["-c", "train"], None)
    assert cli.split_mode(["eval", "-c", "x"], "train") == (["eval", "-c", "x"], "train")


@pytest.mark.unit
def test_workers_run_the_packaged_entry_script():
    assert Path(WORKER_SCRIPT) == REPO / "paddledist" / "worker.py" and WORKER_SCRIPT.endswith(".py")


@pytest.mark.multiproc
def test_the_worker_entry_does_not_put_the_package_folder_on_sys_path(tmp_path):
    probe = ("import runpy, sys; sys.argv = ['w', '--help']; "
             "runpy.run_path(sys.argv_path, run_name='__main__')").replace("sys.argv_path", repr(WORKER_SCRIPT))
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and "paddledist worker" in proc.stdout


LEAVE_PROBE = """
import atexit, ctypes, runpy, sys
libc = ctypes.CDLL(None)
libc.strdup.restype = ctypes.c_void_p
# A C-level exit handler, as paddle's and MKL's teardown are: it prints 'c-teardown' if the C exit runs.
libc.__cxa_atexit(ctypes.cast(libc.puts, ctypes.c_void_p), ctypes.c_void_p(libc.strdup(b"c-teardown")), None)
worker = runpy.run_path(sys.argv[1])
atexit.register(lambda: open(sys.argv[2], "w").write("ran"))
print("buffered", end="")
worker["leave"](3) if sys.argv[3] == "leave" else sys.exit(3)
"""


@pytest.mark.multiproc
@pytest.mark.parametrize("how", ["leave", "exit"])
def test_a_finished_worker_skips_the_c_teardown_but_keeps_its_output_code_and_exit_handlers(tmp_path, how):
    """worker.leave ends a finished worker without the C-level teardown that crashed rank 0 (paddle's TCP-store
    daemon against paddle's static destructors), but with Python's exit handlers, flushed output and its code.
    The plain exit beside it shows the probe sees the C teardown when it runs."""
    marker = tmp_path / "atexit"
    proc = subprocess.run([sys.executable, "-c", LEAVE_PROBE, WORKER_SCRIPT, str(marker), how],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 3 and marker.read_text() == "ran"
    assert proc.stdout == ("buffered" if how == "leave" else "bufferedc-teardown\n")


@pytest.mark.unit
def test_the_cpu_extra_is_the_supported_range_and_nothing_else_names_paddle():
    """setup.py's `cpu` extra is paddle_version's range, and no other requirement names a paddle build: a GPU
    machine's paddlepaddle-gpu stays the only paddle (nothing decided at build time)."""
    setup_py = (REPO / "setup.py").read_text()
    assert re.search(r'CPU_PADDLE = "([^"]+)"', setup_py)[1] == paddle_version.CPU_REQUIREMENT
    assert "importlib.metadata" not in setup_py and "subprocess" not in setup_py
    requires = importlib.metadata.requires("paddledist")
    paddles = [r for r in requires if r.lower().startswith("paddle")]
    assert paddles and all(re.search(r'extra\s*==\s*"cpu"', r) for r in paddles), paddles


@pytest.mark.unit
@pytest.mark.parametrize("version,outcome", [
    ("3.0.0", "ok"), ("3.1.1", "ok"), ("3.2.2", "ok"), ("3.3.1", "ok"), ("3.3.0rc1", "ok"), ("", "ok"),
    ("junk", "ok"), ("3.4.0", "warn"), ("4.0.0", "warn"), ("2.6.2", "old"), (None, "missing")])
def test_paddle_version_judgement(version, outcome, capsys):
    environ = {}
    if outcome in ("old", "missing"):
        with pytest.raises(UserError) as raised:
            paddle_version.judge(version, environ)
        text = str(raised.value)
        assert "\n" not in text and 'pip install "paddledist[cpu]"' in text
        assert "paddlepaddle-gpu" in text and "paddlepaddle.org.cn/packages/stable/cu" in text
        return
    paddle_version.judge(version, environ)
    paddle_version.judge(version, environ)  # the warning is said once: workers inherit the marker
    err = capsys.readouterr().err
    assert err.count("newer than the newest tested (3.3)") == (1 if outcome == "warn" else 0), err
    assert (paddle_version.WARNED in environ) == (outcome == "warn")


@pytest.mark.unit
def test_the_installed_paddle_is_supported():
    version = paddle_version.installed_version()
    assert version and paddle_version.minor(version) >= paddle_version.SUPPORTED[0]


@pytest.mark.unit
@pytest.mark.parametrize("paddle,protobuf,refused", [
    ("3.0.0", "7.36.2", True), ("3.3.0", "7.0.0", True), ("3.2.2", "6.33.6", False), ("3.3.1", "7.36.2", False),
    ("3.4.0", "7.1.0", False), ("3.0.0", None, False), ("", "7.36.2", False), ("3.0.0", "3.20.2", False)])
def test_a_fleet_that_cannot_read_protobuf_7_is_one_line_before_a_multi_process_job(paddle, protobuf, refused):
    """paddle 3.0.0-3.3.0's fleet.init reads FieldDescriptor.label, gone in protobuf 7 (checked by hand on 3.0.0:
    AttributeError in fleet.init; 3.1.1, 3.2.2 and 3.3.0 read it too; 3.3.1 reads both)."""
    why = paddle_version.protobuf_conflict(paddle, protobuf)
    assert bool(why) == refused
    if refused:
        assert 'pip install "protobuf<7"' in why and paddle in why and "\n" not in why


@pytest.mark.unit
def test_the_installed_paddle_and_protobuf_can_start_a_multi_process_job():
    paddle_version.check_for_collectives()

"""Progress of downloads and evaluations: a tqdm bar on a real terminal (a pseudo-terminal here), and on
anything else (a log file, a pipe) plain lines, at most one per interval, in the format users grep."""

from __future__ import annotations

import io
import logging
import os
import time

import pytest

from paddledist import hub
from paddledist.progressbar import Meter
from paddledist.stages.evaluate import logged
from helpers.weight_server import WeightServer

pytestmark = pytest.mark.unit
DATA = os.urandom(3 * 2**20)


@pytest.fixture
def terminal():
    """A real terminal: the write end of a pseudo-terminal (isatty() is true), and a reader of what it shows."""
    leader, follower = os.openpty()
    out = os.fdopen(follower, "w", buffering=1)
    os.set_blocking(leader, False)

    def shown() -> str:
        out.flush()
        chunks = []
        while True:
            try:
                chunks.append(os.read(leader, 1 << 16))
            except BlockingIOError:
                return b"".join(chunks).decode(errors="replace")
    yield out, shown
    out.close()
    os.close(leader)


def test_a_download_on_a_terminal_draws_a_bar(tmp_path, monkeypatch, terminal):
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path))
    out, shown = terminal
    with WeightServer({"/w.pdparams": DATA}) as server:
        hub.resolve(server.url("/w.pdparams"), "Train.pretrain_weight_path", out=out)
    screen = shown()
    assert "downloading:" in screen and "%|" in screen and "/3.00M [" in screen, screen  # tqdm's bar, in MiB
    assert f"paddledist: downloaded {server.url('/w.pdparams')}: 3.0 MiB" in screen


def test_a_download_into_a_log_is_plain_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path))
    out = io.StringIO()
    with WeightServer({"/w.pdparams": DATA}) as server:
        hub.resolve(server.url("/w.pdparams"), "Train.pretrain_weight_path", out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"paddledist: downloading {server.url('/w.pdparams')} (3.0 MiB)"
    assert lines[-1].startswith(f"paddledist: downloaded {server.url('/w.pdparams')}: 3.0 MiB in ")
    assert "\r" not in out.getvalue() and "%|" not in out.getvalue()


def test_plain_lines_come_at_most_once_per_interval():
    out = io.StringIO()
    meter = Meter(out, 100, "work", lambda done: f"done {done}", interval=0.05)
    for _ in range(10):
        meter.update(1)  # within the first interval: nothing
    time.sleep(0.06)
    meter.update(5)
    meter.update(5)
    assert out.getvalue() == "done 15\n"


def test_an_evaluation_on_a_terminal_draws_a_bar_instead_of_iter_lines(terminal, caplog):
    out, shown = terminal
    with caplog.at_level(logging.INFO, logger="paddledist"):
        assert list(logged(range(6), 2, out)) == list(range(6))
    screen = shown()
    assert "evaluate:" in screen and "%|" in screen and "/6 [" in screen and not caplog.records, screen


def test_an_evaluation_into_a_log_keeps_its_iter_lines(caplog):
    with caplog.at_level(logging.INFO, logger="paddledist"):
        assert list(logged(range(5), 2, io.StringIO())) == list(range(5))
    assert [r.getMessage() for r in caplog.records] == ["eval iter 2/5", "eval iter 4/5", "eval iter 5/5"]

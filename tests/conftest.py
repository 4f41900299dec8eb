"""Shared fixtures. Keep this file small: helpers used by one test file belong in that file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.common import HOLDER_MARK, free_port, unavailable  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


@pytest.fixture
def paddlex_yaml() -> Path:
    """A config with every key of PaddleX's image-classification module config."""
    return DATA / "paddlex_cls.yaml"


@pytest.fixture
def write_yaml(tmp_path):
    """`write_yaml(text, name="cfg.yaml") -> Path`: a config file in this test's temp dir."""
    def write(text: str, name: str = "cfg.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path
    return write


@pytest.fixture
def run_tool(tmp_path):
    """`run_tool("train.py", *args) -> CompletedProcess`: a real entry script in a subprocess, cwd = tmp_path."""
    def run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        return subprocess.run([sys.executable, str(REPO / "tools" / script), *map(str, args)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=timeout)
    return run


@pytest.fixture
def busy_port():
    """A free port, then held by another process listening on it: (port, pid)."""
    port = free_port()
    code = (f"import socket, time; {HOLDER_MARK} = 1; s = socket.socket(); s.bind(('', {port})); s.listen(); "
            "print(1, flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "1"
    yield port, proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory):
    """One real etcd member on loopback for the in-process meeting tests: host:port."""
    from helpers.etcd import loopback_member

    proc, endpoint = loopback_member(str(tmp_path_factory.mktemp("etcd")))
    yield endpoint
    proc.kill()
    proc.wait()


FAMILIES = ("unit", "multiproc", "multihost", "bench", "models")


def pytest_collection_modifyitems(items) -> None:
    """Every test belongs to one family (pytest.ini's markers), so `pytest -m unit` and friends select all."""
    lost = [item.nodeid for item in items if not any(item.get_closest_marker(m) for m in FAMILIES)]
    if lost:
        raise pytest.UsageError(f"tests without a family marker ({', '.join(FAMILIES)}): {', '.join(lost[:5])}")


_PROCESS_EVENTS = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                   "pty.spawn")
_started: list[str] = []


def _audit(event: str, args) -> None:
    if event in _PROCESS_EVENTS:
        _started.append(f"{event} {str(args[0])[:80] if args else ''}")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request):
    """The fast lane (`-m unit`) holds pure tests only: a unit-marked test that starts a process fails here, so
    a process creeping into one is moved to its family (multiproc) instead of slowing the lane."""
    _started.clear()
    yield
    if request.node.get_closest_marker("unit") and _started:
        pytest.fail(f"a test marked unit started a process ({_started[0]}): mark it multiproc", pytrace=False)

"""Multi-host healing runs: killing a host's workers, waiting for a log line, reading a run's result."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from helpers.netns import NetnsHosts
from helpers.failures import is_worker, pids_in


EPOCHS = 3


def result(tmp_path: Path, folder: str = "out") -> dict:
    return json.loads((tmp_path / "host0" / folder / "train_result.json").read_text())


def kill_workers(hosts: NetnsHosts, host: int, spare: set = frozenset()) -> set:
    """SIGKILL the ranks on `host` (not its supervisor or paddle's launcher), none of `spare`; their pids."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = {pid for pid in pids_in(hosts, host) if is_worker(pid)} - set(spare)
        if workers:
            break
        time.sleep(0.1)
    assert workers, f"no worker on host {host}"
    for pid in workers:
        os.kill(int(pid), signal.SIGKILL)
    return workers


def wait_for_text(path: Path, text: str, procs, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs.values()), f"a host ended before {text!r}"
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")

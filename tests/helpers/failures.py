"""Multi-host failure runs: the command every namespace host runs, starting, waiting and reading the hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from helpers.netns import NetnsHosts


REPO = Path(__file__).resolve().parents[2]


TRAIN = str(REPO / "tools" / "train.py")


CONFIG = str(REPO / "configs" / "image_classification.yaml")


DATA = str(REPO / "dataset" / "digits")


EPOCHS = 10


def heartbeat_overrides() -> list[str]:
    if os.environ.get("PADDLEDIST_TEST_HEARTBEAT") == "default":
        return []
    return ["Train.heartbeat_interval=1", "Train.heartbeat_timeout=10"]


def command(hosts: NetnsHosts, *extra: str) -> list[str]:
    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_ips={','.join(hosts.addresses)}",
            "Global.output=out", f"Global.dataset_dir={DATA}", f"Train.epochs_iters={EPOCHS}",
            "Train.save_interval=100", "Train.peer_timeout=60", *extra]


def start(hosts: NetnsHosts, tmp_path: Path, run: str, argv: list[str]) -> dict[int, subprocess.Popen]:
    procs = {}
    for i in range(hosts.count):
        home = tmp_path / f"host{i}"
        home.mkdir(exist_ok=True)
        log = open(tmp_path / f"{run}.host{i}.txt", "w")
        procs[i] = hosts.popen(i, argv, cwd=str(home), stdout=log, stderr=subprocess.STDOUT)
    return procs


def output(tmp_path: Path, run: str, i: int) -> str:
    return (tmp_path / f"{run}.host{i}.txt").read_text()


def wait_for_epoch(tmp_path: Path, epoch: int, procs, timeout: float = 180) -> None:
    """Until host 0 has recorded `epoch` complete epochs (train_result.json is rewritten after each)."""
    result = tmp_path / "host0" / "out" / "train_result.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs.values()), "a host ended before the failure was caused"
        try:
            if len(json.loads(result.read_text())["history"]) >= epoch:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"epoch {epoch} never finished")


def wait_all(procs, timeout: float) -> dict[int, tuple[int, float]]:
    """host -> (exit code, seconds from now until it exited); a host still running after `timeout` fails."""
    start, done = time.monotonic(), {}
    while len(done) < len(procs) and time.monotonic() - start < timeout:
        for i, p in procs.items():
            if i not in done and p.poll() is not None:
                done[i] = (p.returncode, time.monotonic() - start)
        time.sleep(0.05)
    assert len(done) == len(procs), f"still running after {timeout}s: {set(procs) - set(done)}"
    return done


def pids_in(hosts: NetnsHosts, i: int) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", hosts.namespaces[i]], capture_output=True, text=True).stdout.split()


def is_worker(pid: str) -> bool:
    """A process paddle's launcher started for a rank (it carries the rank variables)."""
    try:
        return b"PADDLE_TRAINER_ID=" in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False

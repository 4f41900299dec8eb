"""Elastic multi-host runs: killing a whole host, the list-style command."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from helpers.netns import NetnsHosts
from helpers.failures import CONFIG, DATA, TRAIN, heartbeat_overrides, output, pids_in, start, wait_all
from helpers.heal import EPOCHS


def kill_host(hosts: NetnsHosts, procs, host: int) -> None:
    """SIGKILL the host's supervisor with its process group, then its workers (paddle's launcher gives each
    its own session): nothing of the job is left there."""
    os.killpg(os.getpgid(procs[host].pid), signal.SIGKILL)
    for pid in pids_in(hosts, host):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    procs[host].wait(timeout=10)


def list_command(addresses, *extra: str) -> list[str]:
    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_ips={','.join(addresses)}", "Global.output=out",
            f"Global.dataset_dir={DATA}", f"Train.epochs_iters={EPOCHS}", "Train.peer_timeout=60",
            "Train.uniform_output_enabled=False", "Train.resume_path=auto", "Train.batch_size=8",
            "Train.augment=False", "Train.log_interval=1", "Train.learning_rate=0.01", *heartbeat_overrides(), *extra]


def params(path: Path) -> dict:
    """The parameters of the latest checkpoint under a Global.output."""
    import paddle

    return paddle.load(str(path / "latest" / "latest.pdparams"), return_numpy=True)


def largest_difference(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max(float(abs(a[k] - b[k]).max()) for k in a)


@pytest.fixture(scope="session")
def uninterrupted():
    """`run(hosts, tmp_path, *overrides)`: the parameters of an uninterrupted list_command run on those hosts, run
    once a session for each host count and overrides (the math does not depend on the hosts' addresses, so the
    tests that compare with the same run share it)."""
    found: dict = {}

    def run(hosts: NetnsHosts, tmp_path: Path, *extra: str) -> dict:
        key = (len(hosts.addresses), extra)
        if key not in found:
            ref = start(hosts, tmp_path, "reference", list_command(hosts.addresses, "Global.output=ref", *extra))
            assert all(code == 0 for code, _ in wait_all(ref, timeout=400).values()), output(tmp_path, "reference", 0)
            found[key] = params(tmp_path / "host0" / "ref")
        return found[key]

    return run

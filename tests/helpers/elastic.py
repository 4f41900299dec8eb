"""Elastic multi-host runs: killing a whole host, the list-style command."""

from __future__ import annotations

import os
import signal
import sys
from helpers.netns import NetnsHosts
from helpers.failures import CONFIG, DATA, TRAIN, heartbeat_overrides, pids_in
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

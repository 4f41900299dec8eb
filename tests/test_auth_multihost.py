"""Strangers on Train.port, for real: network-namespace hosts run the job's own command (and
paddledist.testing.stranger, an attacker's hello) against a 2-host job while its hub waits for its peers. The
job must finish on its real machines, the hub naming every rejected connection. Skips without root/netns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.netns import netns_hosts  # noqa: F401  (fixture)

pytestmark = pytest.mark.multihost

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "tools" / "train.py")
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DATA = str(REPO / "dataset" / "digits")
SECRET = "the-job-secret-4f1c2b9a7e3d5c6b"


def job_argv(hosts, tmp_path: Path, i: int, *extra: str) -> list[str]:
    ips = f"{hosts.addresses[0]},{hosts.addresses[1]}"
    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_ips={ips}", f"Global.output={tmp_path}/host{i}",
            f"Global.dataset_dir={DATA}", "Train.epochs_iters=1", "Train.peer_timeout=90", *extra]


def env_with(secret) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PADDLEDIST_JOB_SECRET"}
    return {**env, "PADDLEDIST_JOB_SECRET": secret} if secret else env


def run_logged(hosts, i: int, argv: list[str], log: Path, env: dict) -> subprocess.Popen:
    return hosts.popen(i, argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def stranger(hosts, on: int, attack: str) -> dict:
    argv = [sys.executable, "-m", "paddledist.testing.stranger", "--hub", f"{hosts.addresses[0]}:6170",
            "--nodes", f"{hosts.addresses[0]},{hosts.addresses[1]}", "--claim", "1", "--try", attack,
            "--secret", SECRET]
    done = hosts.run(on, argv, timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])["answer"]


def finish_job(hosts, tmp_path: Path, hub: subprocess.Popen, secret) -> str:
    """Start the real second machine, wait for both; the hub's output."""
    node1 = run_logged(hosts, 1, job_argv(hosts, tmp_path, 1), tmp_path / "node1.txt", env_with(secret))
    codes = (hub.wait(timeout=300), node1.wait(timeout=300))
    hub_log, node1_log = (tmp_path / "hub.txt").read_text(), (tmp_path / "node1.txt").read_text()
    assert codes == (0, 0), f"hub:\n{hub_log[-3000:]}\nnode 1:\n{node1_log[-3000:]}"
    result = json.loads((tmp_path / "host0" / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (2, True)
    return hub_log


def test_without_a_secret_a_third_machine_posing_as_node_1_is_refused(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    hub = run_logged(hosts, 0, job_argv(hosts, tmp_path, 0), tmp_path / "hub.txt", env_with(None))
    impostor = hosts.run(2, job_argv(hosts, tmp_path, 2, f"Train.node_ip={hosts.addresses[1]}"), timeout=120,
                         env=env_with(None))
    assert impostor.returncode == 2, impostor.stdout + impostor.stderr
    why = f"it claims to be node 1 ({hosts.addresses[1]}) but comes from another address"
    assert f"reports: rejected this connection: {why}" in impostor.stderr, impostor.stderr
    hub_log = finish_job(hosts, tmp_path, hub, None)
    assert f"paddledist: node 0 rejected a connection from {hosts.addresses[2]}: {why}" in hub_log
    assert "not authenticated; to refuse strangers set PADDLEDIST_JOB_SECRET" in hub_log


def test_with_a_secret_strangers_cannot_join_or_stop_a_job(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    hub = run_logged(hosts, 0, job_argv(hosts, tmp_path, 0), tmp_path / "hub.txt", env_with(SECRET))
    wrong = "wrong job secret (or a hello recorded from another connection)"
    expected = {"plain": "no job secret", "stop": "no job secret", "wrong": wrong, "replay": wrong}
    for attack, why in expected.items():  # from node 1's own address: the address check passes, the secret not
        assert stranger(hosts, 1, attack) == {"ok": False, "error": f"rejected this connection: {why}"}, attack
    bad = hosts.run(1, job_argv(hosts, tmp_path, 1), timeout=120, env=env_with("a-wrong-secret-0123456789"))
    assert bad.returncode == 2 and f"reports: rejected this connection: {wrong}" in bad.stderr, bad.stderr
    missing = hosts.run(1, job_argv(hosts, tmp_path, 1), timeout=120, env=env_with(None))
    assert missing.returncode == 2 and "requires the job secret: set PADDLEDIST_JOB_SECRET" in missing.stderr
    hub_log = finish_job(hosts, tmp_path, hub, SECRET)
    rejected = [line for line in hub_log.splitlines() if line.startswith("paddledist: node 0 rejected a connection")]
    assert len(rejected) == 5 and all(hosts.addresses[1] in line for line in rejected), rejected
    assert "not authenticated" not in hub_log and SECRET not in hub_log
    workerlogs = "".join(p.read_text() for p in (tmp_path / "host0").glob("**/workerlog.*"))
    assert SECRET not in workerlogs

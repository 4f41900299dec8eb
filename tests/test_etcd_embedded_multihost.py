"""The job's own etcd (with Train.dist_ips) on real namespace hosts: one member on each
of three hosts, authenticated with the job secret. A fourth host without the secret reads none of the job's keys
with etcdctl; the first host's member killed mid-run leaves a quorum of two and all three finish; the members'
data folders are gone afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from helpers.elastic import list_command
from helpers.etcd import etcdctl
from helpers.failures import output, wait_all
from helpers.heal import wait_for_text
from helpers.netns import netns_hosts  # noqa: F401  (fixture)

pytestmark = pytest.mark.multihost

SECRET = "a-job-secret-for-the-etcd-test-93be1f"
PORT = 6170


def member_pid(address: str) -> int:
    """The etcd member listening for clients on `address` (every namespace shares this machine's /proc)."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if argv[0].endswith(b"etcd") and f"http://{address}:{PORT}".encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no etcd member for {address}")


def start_three(hosts, tmp_path: Path, *extra: str) -> dict[int, subprocess.Popen]:
    argv = list_command(hosts.addresses[:3], "Train.epochs_iters=3", *extra)
    procs = {}
    for i in range(3):
        home = tmp_path / f"host{i}"
        home.mkdir()
        env = {**os.environ, "PADDLEDIST_JOB_SECRET": SECRET, "PADDLEDIST_HOME": str(home / "home")}
        log = open(tmp_path / f"job.host{i}.txt", "w")
        procs[i] = hosts.popen(i, argv, env=env, cwd=str(home), stdout=log, stderr=subprocess.STDOUT)
    return procs


def test_the_jobs_own_etcd_refuses_strangers_and_survives_losing_the_first_member(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(4)
    procs = start_three(hosts, tmp_path)
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", "epoch 1/3 iter 5/", procs, timeout=300)
    endpoints = ",".join(f"http://{a}:{PORT}" for a in hosts.addresses[:3])
    stranger = etcdctl(lambda argv: hosts.run(3, argv), endpoints, "get", "--prefix", "/paddledist/")
    guessing = etcdctl(lambda argv: hosts.run(3, argv), endpoints, "get", "--prefix", "/paddledist/",
                       user="paddledist:not-the-secret")
    for refused in (stranger, guessing):
        assert refused.returncode != 0 and "/paddledist/" not in refused.stdout, refused.stdout + refused.stderr
    assert "user name is empty" in stranger.stderr or "permission denied" in stranger.stderr, stranger.stderr
    assert "authentication failed" in guessing.stderr, guessing.stderr
    os.kill(member_pid(hosts.addresses[0]), signal.SIGKILL)
    done = wait_all(procs, timeout=400)
    for i, (code, _) in done.items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'job', i)[-4000:]}"
    got = json.loads((tmp_path / "host0" / "out" / "train_result.json").read_text())
    assert got["done_flag"] is True and got["world_size"] == 3 and not got.get("restarts"), got
    for i in range(3):
        left = list((tmp_path / f"host{i}" / "home" / "etcd").rglob("member"))
        assert not left, f"host {i} kept its etcd data: {left}"


def test_a_host_cut_off_stops_itself_and_the_two_others_finish_without_it(netns_hosts, tmp_path):  # noqa: F811
    """Every process stays alive; host 2's link goes down. Its member is the minority of the job's etcd: host 2
    cannot renew its lease and stops itself, the other two see the lease end, decide once and finish."""
    hosts = netns_hosts(3)
    procs = start_three(hosts, tmp_path, "Train.nnodes=2:3", "Train.max_restarts=1", "Train.peer_timeout=20",
                        "Train.heartbeat_timeout=6")
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", "epoch 2/3 iter 5/", procs, timeout=300)
    subprocess.run(["ip", "link", "set", f"{hosts.tag}h2", "down"], check=True)
    done = wait_all(procs, timeout=400)
    a, b, c = hosts.addresses
    for i in (0, 1):
        assert done[i][0] == 0, f"host {i}:\n{output(tmp_path, 'job', i)[-4000:]}"
    assert done[2][0] != 0 and f"node 2 ({c}) lost: it could not reach the job's etcd" in output(tmp_path, "job", 2)
    got = json.loads((tmp_path / "host0" / "out" / "train_result.json").read_text())
    assert got["done_flag"] is True and got["world_size"] == 2, got
    assert [r["nodes"] for r in got["restarts"]] == [2] and f"node 2 ({c}) lost" in got["restarts"][0]["cause"], got
    resumed = (tmp_path / "host0" / "out" / "logs" / "train.rank0.log").read_text()
    assert "resumed from epoch" in resumed, resumed[-2000:]  # from its latest, not trained again

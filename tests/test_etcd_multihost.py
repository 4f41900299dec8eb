"""The control plane in a user's etcd (Train.dist_master=etcd://...) on real namespace hosts: a 3-member etcd
cluster beside the three training hosts' supervisors. The machines' keys live there while the job runs; a host
lost for good (every process there, its etcd member too) leaves two that meet again by etcd's quorum and finish
with the restart recorded (a member killed mid-run: tests/test_etcd_embedded_multihost.py, the same client)."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.elastic import kill_host
from helpers.etcd import etcdctl, start_cluster, wait_healthy
from helpers.failures import CONFIG, DATA, TRAIN, output, start, wait_all
from helpers.heal import wait_for_text
from helpers.netns import netns_hosts  # noqa: F401  (fixture)

pytestmark = pytest.mark.multihost


def etcd_command(addresses, *extra: str) -> list[str]:
    endpoints = ",".join(f"{a}:2379" for a in addresses)
    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_master=etcd://{endpoints}", "Global.output=out",
            f"Global.dataset_dir={DATA}", "Train.epochs_iters=4", "Train.peer_timeout=60", "Train.batch_size=8",
            "Train.uniform_output_enabled=False", "Train.augment=False", "Train.log_interval=1",
            "Train.heartbeat_interval=1", "Train.heartbeat_timeout=10", *extra]


def three_with_etcd(hosts, tmp_path):
    members = start_cluster(hosts.popen, hosts.addresses, (0, 1, 2), str(tmp_path))
    endpoints = ",".join(f"http://{a}:2379" for a in hosts.addresses)
    wait_healthy(lambda argv: hosts.run(0, argv), endpoints)
    return members, endpoints


def test_a_user_etcd_holds_the_keys_and_a_host_lost_for_good_leaves_two_that_finish(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    _, endpoints = three_with_etcd(hosts, tmp_path)
    procs = start(hosts, tmp_path, "job", etcd_command(hosts.addresses, "Train.nnodes=2:3", "Train.max_restarts=1"))
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", "epoch 2/4 iter 5/", procs, timeout=300)
    keys = etcdctl(lambda argv: hosts.run(1, argv), endpoints, "get", "--prefix", "--keys-only", "/paddledist/")
    for address in hosts.addresses:
        assert f"/paddledist/paddledist/g1/node/{address}" in keys.stdout, keys.stdout + keys.stderr
    kill_host(hosts, procs, 2)
    done = wait_all({i: procs[i] for i in (0, 1)}, timeout=400)
    a, b, c = hosts.addresses
    for i, (code, _) in done.items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'job', i)[-4000:]}"
    got = json.loads((tmp_path / "host0" / "out" / "train_result.json").read_text())
    assert got["done_flag"] is True and got["world_size"] == 2, got
    assert len(got["restarts"]) == 1 and got["restarts"][0]["nodes"] == 2, got["restarts"]
    assert f"node 2 ({c}) lost" in got["restarts"][0]["cause"], got["restarts"]
    plan = etcdctl(lambda argv: hosts.run(0, argv), f"http://{a}:2379,http://{b}:2379", "get",
                   "/paddledist/paddledist/g2/plan", "--print-value-only")
    assert json.loads(plan.stdout) == {"nodes": [a, b]}, plan.stdout + plan.stderr

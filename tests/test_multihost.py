"""Real multi-host runs: network-namespace "hosts" on a bridge, each running the same command, as on real
machines. Skips where namespaces cannot be made (not root, no `ip netns`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers.netns import NetnsHosts, netns_hosts  # noqa: F401  (fixture)

import pytest
from helpers.hosts import (CONFIG, DATA, TRAIN, digest_of_saved_weights, final_digest,
                           finish, start_all)  # noqa: F401

pytestmark = pytest.mark.multihost


def train_argv(hosts: NetnsHosts, tmp_path: Path, nodes, *extra: str, script: str = TRAIN):
    """The same command on every host; only Global.output differs, as if each machine had its own disk."""
    ips = ",".join(hosts.addresses[i] for i in nodes)
    return lambda i: [sys.executable, script, "-c", CONFIG, "-o", f"Train.dist_ips={ips}",
                      f"Global.output={tmp_path}/host{i}", f"Global.dataset_dir={DATA}", "Train.epochs_iters=1",
                      *extra]


@pytest.mark.compat
def test_three_hosts_train_one_model(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    argv = train_argv(hosts, tmp_path, range(3), "Train.peer_timeout=60")
    done = finish(start_all(hosts, range(3), argv, tmp_path), tmp_path)
    for i, (code, output) in done.items():
        assert code == 0, f"host {i}:\n{output[-4000:]}"
        assert f"this node = node {i} of 3 ({hosts.addresses[i]} on eth0" in output
    result = json.loads((tmp_path / "host0" / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (3, True)
    assert not (tmp_path / "host1" / "train_result.json").exists()  # rank 0 alone writes results
    # Every rank logs a digest of its final parameters (the trainer saves weights on rank 0 only).
    digests = [final_digest(tmp_path / f"host{i}" / "logs" / f"train.rank{i}.log") for i in range(3)]
    assert digests[0] == digests[1] == digests[2]
    assert digests[0] == digest_of_saved_weights(tmp_path / "host0" / "latest" / "latest.pdparams")


def test_dry_run_on_a_namespace_host_shows_ips_host_and_interface(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    done = hosts.run(1, train_argv(hosts, tmp_path, range(2))(1) + ["--dry-run"], timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = hosts.addresses
    assert f"this node = node 1 of 2 ({b} on eth0, matched a local interface; rank 1 of world size 2)" in done.stdout
    assert f"--ips {a},{b} --start_port 6171 --host {b} --nproc_per_node 1" in done.stdout
    assert "GLOO_SOCKET_IFNAME=eth0" in done.stdout.splitlines()
    assert not (tmp_path / "host1").exists()


def test_host_not_in_the_list_exits_2_without_traceback(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    done = hosts.run(2, train_argv(hosts, tmp_path, (0, 1))(2), timeout=60, cwd=str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"this machine is not in Train.dist_ips {hosts.addresses[0]},{hosts.addresses[1]}" in done.stderr
    assert f"{hosts.addresses[2]} on eth0" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_that_never_comes_is_named_on_every_node(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    argv = train_argv(hosts, tmp_path, range(3), "Train.peer_timeout=3")
    done = finish(start_all(hosts, (0, 1), argv, tmp_path), tmp_path, timeout=60)
    missing = f"node 2 ({hosts.addresses[2]}) did not join within Train.peer_timeout=3s"
    for i, (code, output) in done.items():
        assert code == 2, f"host {i}:\n{output[-3000:]}"
        assert missing in output and "Traceback" not in output

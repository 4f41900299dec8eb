"""Where the machines come from (config, Kubeflow's PaddleJob, paddle-operator, Slurm), host names, the
master-address form of the launch, and the rank agreement at the meeting in a real etcd (in-process, on
loopback addresses). The real multi-host runs are in tests/test_multihost_sched.py."""

from __future__ import annotations

import dataclasses

import pytest
from helpers.common import free_port

from paddledist.cluster import plan
from paddledist.cluster.hello import Hello, nodes_mismatch
from paddledist.cluster.sources import find_source
from paddledist.config import load
from paddledist.errors import UserError
from paddledist.launch import build
from helpers.loopback import LAN, master_node, meet  # noqa: F401

pytestmark = pytest.mark.unit

KUBEFLOW_WORKER_1 = {"PADDLE_MASTER": "job-worker-0:36543", "PADDLE_NNODES": "3", "PADDLE_JOB_ID": "job"}
OPERATOR = {"POD_IP": "10.0.0.2", "PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2",
            "PADDLE_TRAINERS": "10.0.0.1,10.0.0.2", "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:2379,10.0.0.2:2379",
            "TRAINING_ROLE": "TRAINER", "PADDLE_PORT": "2379"}
SLURM = {"SLURM_JOB_NODELIST": "10.0.0.[1-2]", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_NTASKS": "2"}


def cfg(*overrides: str):
    return load(None, ["Global.output=out", *overrides])


# --- sources -------------------------------------------------------------------------------------------------

def test_kubeflow_master_and_count_without_rank():
    source = find_source(cfg(), KUBEFLOW_WORKER_1)
    assert (source.style, source.master, source.nnodes, source.names, source.rank) == \
        ("master", "job-worker-0:36543", 3, (), None)
    assert "Kubeflow PaddleJob" in source.origin
    assert find_source(cfg(), {"PADDLE_MASTER": "10.0.0.1", "PADDLE_NNODES": "2"}).master == "10.0.0.1:36543"
    with pytest.raises(UserError, match="PADDLE_MASTER=10.0.0.1:1 is set without PADDLE_NNODES"):
        find_source(cfg(), {"PADDLE_MASTER": "10.0.0.1:1"})


def test_paddle_operator_list_and_rank_from_its_variables():
    source = find_source(cfg(), OPERATOR)
    assert (source.style, source.names, source.rank, source.key) == ("ips", ("10.0.0.1", "10.0.0.2"), 1,
                                                                     "PADDLE_TRAINERS")
    endpoints_only = {k: v for k, v in OPERATOR.items() if k != "PADDLE_TRAINERS"}
    assert find_source(cfg(), endpoints_only).names == ("10.0.0.1", "10.0.0.2")
    with pytest.raises(UserError, match="PADDLE_TRAINERS_NUM=3 but PADDLE_TRAINERS names 2 machines"):
        find_source(cfg(), {**OPERATOR, "PADDLE_TRAINERS_NUM": "3"})


def test_slurm_step_variables_and_one_task_per_node():
    source = find_source(cfg("Train.launch_style=master"), SLURM)
    assert (source.style, source.names, source.rank) == ("master", ("10.0.0.1", "10.0.0.2"), 1)
    with pytest.raises(UserError, match="SLURM_NTASKS=4 on 2 nodes: start one task per node"):
        find_source(cfg(), {**SLURM, "SLURM_NTASKS": "4"})


def test_the_config_wins_over_a_platform_and_the_log_says_so():
    p = plan(cfg("Train.dist_ips=10.0.0.2,10.0.0.9"), local=LAN, env=SLURM)
    assert p.nodes == ("10.0.0.2", "10.0.0.9") and p.node_rank == 0
    assert "machines from Train.dist_ips; SLURM_JOB_NODELIST and SLURM_NODEID (Slurm) in the environment " \
           "ignored: the config wins" in p.summary()


@pytest.mark.parametrize("overrides, words", [
    (["Train.dist_ips=10.0.0.1,10.0.0.2", "Train.dist_master=10.0.0.1:5000"], "both set"),
    (["Train.dist_master=10.0.0.1:5000"], "Train.dist_master needs Train.nnodes"),
    (["Train.nnodes=2"], "Train.nnodes=2 needs Train.dist_master"),
    (["Train.dist_ips=10.0.0.1,10.0.0.2", "Train.nnodes=3"], "Train.nnodes=3 but Train.dist_ips lists 2"),
    (["Train.dist_master=10.0.0.2:6170", "Train.nnodes=2"], "the port must be a free TCP port other than Train.port"),
])
def test_master_keys_that_do_not_fit_together(overrides, words):
    with pytest.raises(UserError, match=words):
        plan(cfg(*overrides), local=LAN, env={})


@pytest.mark.parametrize("override, words", [
    ("Train.dist_master=10.0.0.1", "is not host:port"),
    ("Train.launch_style=mpi", "Train.launch_style: unknown value 'mpi'"),
    ("Train.nnodes=0", "Train.nnodes must be >= 1"),
])
def test_master_keys_are_validated_at_load(override, words):
    with pytest.raises(UserError, match=words):
        load(None, [override])


# --- plans -----------------------------------------------------------------------------------------------------

def test_a_platform_list_takes_the_platforms_rank_and_checks_it_against_the_interfaces():
    p = plan(cfg(), local=LAN, env=SLURM)
    assert (p.nodes, p.node_rank, p.ifname) == (("10.0.0.1", "10.0.0.2"), 1, "eth0")
    assert "rank from SLURM_NODEID" in p.summary()
    with pytest.raises(UserError, match=r"SLURM_NODEID=0 makes this machine node 0 \(10.0.0.1\), but it holds "
                                        r"10.0.0.2"):
        plan(cfg(), local=LAN, env={**SLURM, "SLURM_NODEID": "0"})
    assert plan(cfg(), local=LAN, env=OPERATOR).node_rank == 1


def test_host_names_resolve_and_a_name_for_loopback_is_refused_across_machines():
    assert plan(cfg("Train.dist_ips=localhost"), local=LAN, env={}).nodes == ("127.0.0.1",)
    with pytest.raises(UserError, match=r"entry 2 'localhost' \(resolved from 'localhost'\)|loopback"):
        plan(cfg("Train.dist_ips=10.0.0.2,localhost"), local=LAN, env={})


def test_master_mode_node_0_holds_the_master_address():
    p = plan(cfg("Train.dist_master=10.0.0.2:36543", "Train.nnodes=3"), local=LAN, env={})
    assert (p.nodes, p.node_rank, p.style, p.master_port, p.agreed) == (("10.0.0.2", "", ""), 0, "master", 36543,
                                                                         False)
    assert p.summary().startswith("this node = node 0 of 3 (10.0.0.2 on eth0, holds the master address; rank 0")


def test_master_mode_other_nodes_wait_for_their_rank():
    p = plan(cfg(), local=LAN, env={**KUBEFLOW_WORKER_1, "PADDLE_MASTER": "10.0.0.1:36543", "POD_IP": "10.0.0.2"})
    assert (p.nodes, p.node_rank, p.agreed) == (("10.0.0.1", "10.0.0.2", ""), 1, False)
    assert "this node = a node of 3 (10.0.0.2 on eth0, POD_IP; node rank agreed at the etcd meeting" in p.summary()
    assert "machines from PADDLE_MASTER and PADDLE_NNODES (Kubeflow PaddleJob)" in p.summary()


def test_the_master_form_of_the_launch():
    c = cfg("Train.dist_ips=10.0.0.1,10.0.0.2", "Train.launch_style=master", "Global.device=cpu:0,1")
    argv, _ = build(c, plan(c, local=LAN, env={}), "t.py", [], {}, python="py", package_root="/pkg")
    assert argv[:13] == ["py", "-m", "paddle.distributed.launch", "--master", "10.0.0.1:6171", "--nnodes", "2",
                         "--rank", "1", "--host", "10.0.0.2", "--nproc_per_node", "2"]


# --- the meeting: ranks agreed by address, or the platform's ranks --------------------------------------------------


@pytest.mark.multiproc
def test_ranks_follow_the_addresses_whatever_the_arrival_order(etcd_endpoint):
    port = free_port()
    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.10")
    results = meet(etcd_endpoint, master_node("127.0.0.10", port, 3), master_node("127.0.0.2", port, 3),
                   master_node("127.0.0.1", port, 3))
    assert results == [(nodes, 2, True), (nodes, 1, True), (nodes, 0, True)]


@pytest.mark.multiproc
def test_the_master_is_node_0_whatever_its_address(etcd_endpoint):
    port = free_port()
    master = dataclasses.replace(master_node("127.0.0.1", port, 2), nodes=("127.0.0.9", ""))
    joiner = dataclasses.replace(master_node("127.0.0.2", port, 2), nodes=("127.0.0.9", "127.0.0.2"))
    results = meet(etcd_endpoint, joiner, master)
    nodes = ("127.0.0.9", "127.0.0.2")
    assert results == [(nodes, 1, True), (nodes, 0, True)]


@pytest.mark.multiproc
def test_the_platforms_ranks_win_over_the_address_order(etcd_endpoint):
    port = free_port()
    nodes = ("127.0.0.1", "127.0.0.9", "127.0.0.2")
    results = meet(etcd_endpoint, master_node("127.0.0.1", port, 3), master_node("127.0.0.2", port, 3, rank=2),
                   master_node("127.0.0.9", port, 3, rank=1))
    assert results == [(nodes, 0, True), (nodes, 2, True), (nodes, 1, True)]


@pytest.mark.multiproc
def test_two_machines_claiming_one_address_are_named_and_nobody_launches(etcd_endpoint):
    port = free_port()
    results = meet(etcd_endpoint, master_node("127.0.0.1", port, 3, timeout=6),
                   master_node("127.0.0.2", port, 3, timeout=6), master_node("127.0.0.2", port, 3, timeout=6))
    assert all(isinstance(r, str) for r in results), results
    assert sum("two machines say they are 127.0.0.2" in r for r in results) == 1, results


def test_a_name_resolving_differently_is_named():
    mine = Hello(job="j", nodes=("10.0.0.1", "10.0.0.2"), node=0, names=("node1", "node2"), address="10.0.0.1",
                 rank=None, agreed=True, style="ips", master_port=6171, origin="Train.dist_ips", kind="cpu", nproc=1,
                 facts={})
    theirs = dataclasses.replace(mine, nodes=("10.0.0.1", "10.0.0.7"), node=1)
    assert nodes_mismatch("node 1 (10.0.0.2)", mine, theirs) == (
        "node 1 (10.0.0.2): 'node2' resolves to 10.0.0.7 there, to 10.0.0.2 on node 0; make every machine's "
        "/etc/hosts or DNS give each name the same IPv4 address")
    assert nodes_mismatch("n", mine, dataclasses.replace(mine)) is None

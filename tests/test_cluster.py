"""cluster: Train.dist_ips validation, local address discovery, finding this node, the meeting in etcd."""

from __future__ import annotations

import socket
import time

import pytest
from helpers.common import HOLDER_MARK, free_port

from paddledist.cluster import ClusterPlan, LocalAddress, local_addresses, plan, validate_dist_ips
from paddledist.cluster import interfaces
from paddledist.config import DeviceSpec, load
from paddledist.errors import UserError
from helpers.loopback import run_nodes  # noqa: F401


LAN = (LocalAddress("lo", "127.0.0.1"), LocalAddress("eth0", "10.0.0.2"), LocalAddress("eth0", "fe80::1"))


def cfg(*overrides: str):
    return load(None, list(overrides))


# --- Train.dist_ips validation -------------------------------------------------------------------------

@pytest.mark.unit
def test_valid_list_keeps_rank_order_and_canonicalises():
    assert validate_dist_ips(["10.0.0.2", " 10.0.0.1 ", "10.0.0.10"]) == ("10.0.0.2", "10.0.0.1", "10.0.0.10")


@pytest.mark.unit
@pytest.mark.parametrize("entries, words", [
    (["10.0.0.1", ""], ["entry 2", "empty"]),
    (["10.0.0.1", None], ["entry 2", "empty"]),
    (["10.0.0.1", "node-b.invalid"], ["entry 2", "host name 'node-b.invalid' does not resolve", "/etc/hosts"]),
    (["10.0.0.1", "10.0.0.300"], ["'10.0.0.300'", "neither an IPv4 address nor a host name"]),
    (["10.0.0.1", "not a host!"], ["'not a host!'", "neither an IPv4 address nor a host name"]),
    (["10.0.0.1", "localhost"], ["'localhost' (resolved from", "loopback", "/etc/hosts"]),
    (["10.0.0.1", "10.0.0.2", "10.0.0.1"], ["10.0.0.1 twice", "entries 1 and 3"]),
    (["127.0.0.1", "10.0.0.2"], ["entry 1", "loopback"]),
    (["10.0.0.1", "0.0.0.0"], ["'0.0.0.0'", "not a machine's address"]),
    (["10.0.0.1", "fd00::2"], ["'fd00::2'", "IPv6", "IPv4 addresses only"]),
])
def test_bad_entries_are_named(entries, words):
    with pytest.raises(UserError) as e:
        validate_dist_ips(entries)
    assert all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.unit
def test_loopback_is_fine_for_a_single_machine():
    assert validate_dist_ips(["127.0.0.1"]) == ("127.0.0.1",)


# --- local addresses -------------------------------------------------------------------------------------

@pytest.mark.unit
def test_local_addresses_include_loopback_on_lo():
    found = local_addresses()
    assert LocalAddress("lo", "127.0.0.1") in found
    assert all(isinstance(a.ifname, str) and a.ifname for a in found)


@pytest.mark.unit
def test_getifaddrs_and_fallback_agree_on_primary_ipv4_addresses():
    primary = set(interfaces._ioctl_ipv4())
    assert primary and primary <= set(interfaces._getifaddrs())


@pytest.mark.unit
def test_proc_ipv6_parser(tmp_path):
    table = tmp_path / "if_inet6"
    table.write_text("00000000000000000000000000000001 01 80 10 80       lo\n"
                     "fd000000000000000000000000000002 04 40 00 82     eth0\n")
    assert interfaces._proc_ipv6(str(table)) == [LocalAddress("lo", "::1"), LocalAddress("eth0", "fd00::2")]


# --- plan: which node is this? -------------------------------------------------------------------------

@pytest.mark.unit
def test_no_dist_ips_is_one_local_node():
    p = plan(cfg("Global.device=cpu:0,1"), local=LAN, env={})
    assert (p.nodes, p.node_rank, p.host, p.ifname, p.world_size, list(p.ranks)) == \
        (("127.0.0.1",), 0, "127.0.0.1", "lo", 2, [0, 1])


@pytest.mark.unit
def test_exactly_one_local_match_is_this_node_in_list_order():
    p = plan(cfg("Train.dist_ips=10.0.0.1,10.0.0.2,10.0.0.3", "Global.device=gpu:0,1"), local=LAN, env={})
    assert (p.node_rank, p.host, p.ifname, p.world_size, list(p.ranks)) == (1, "10.0.0.2", "eth0", 6, [2, 3])
    assert p.summary().startswith("this node = node 1 of 3 (10.0.0.2 on eth0")
    assert "ranks 2..3 of world size 6" in p.summary()


@pytest.mark.unit
def test_no_local_match_lists_local_addresses_and_the_list():
    with pytest.raises(UserError) as e:
        plan(cfg("Train.dist_ips=10.0.0.5,10.0.0.6"), local=LAN, env={})
    message = str(e.value)
    assert "not in Train.dist_ips 10.0.0.5,10.0.0.6" in message and "10.0.0.2 on eth0" in message
    assert "Train.node_ip" in message


@pytest.mark.unit
def test_several_local_matches_ask_for_node_ip():
    local = LAN + (LocalAddress("eth1", "10.0.0.3"),)
    with pytest.raises(UserError, match="several Train.dist_ips addresses .*10.0.0.2 on eth0, 10.0.0.3 on eth1"):
        plan(cfg("Train.dist_ips=10.0.0.2,10.0.0.3"), local=local, env={})


@pytest.mark.unit
def test_node_ip_overrides_matching_and_must_be_listed():
    local = LAN + (LocalAddress("eth1", "10.0.0.3"),)
    p = plan(cfg("Train.dist_ips=10.0.0.2,10.0.0.3", "Train.node_ip=10.0.0.3"), local=local, env={})
    assert (p.node_rank, p.ifname, p.source) == (1, "eth1", "Train.node_ip")
    with pytest.raises(UserError, match=r"Train.node_ip=10.0.0.9 is not in Train.dist_ips"):
        plan(cfg("Train.dist_ips=10.0.0.2,10.0.0.3", "Train.node_ip=10.0.0.9"), local=local, env={})


@pytest.mark.unit
def test_node_ip_outside_local_interfaces_leaves_interface_unknown():
    p = plan(cfg("Train.dist_ips=203.0.113.1,203.0.113.2", "Train.node_ip=203.0.113.2"), local=LAN, env={})
    assert (p.node_rank, p.ifname) == (1, None)
    assert "interface unknown" in p.summary()


@pytest.mark.unit
def test_pod_ip_counts_only_when_listed():
    p = plan(cfg("Train.dist_ips=10.0.0.1,10.0.0.9"), local=LAN, env={"POD_IP": "10.0.0.9"})
    assert (p.node_rank, p.source) == (1, "POD_IP")
    p = plan(cfg("Train.dist_ips=10.0.0.1,10.0.0.2"), local=LAN, env={"POD_IP": "172.16.0.4"})
    assert (p.node_rank, p.source) == (1, "matched a local interface")


@pytest.mark.unit
def test_invalid_list_is_rejected_before_matching():
    with pytest.raises(UserError, match="10.0.0.2 twice"):
        plan(cfg("Train.dist_ips=10.0.0.2,10.0.0.2"), local=LAN, env={})


# --- the meeting in etcd: every node meets the others, bounded in time ------------------------------------------

def node(rank: int, port: int, nproc: int = 1, timeout: int = 10, nodes=("127.0.0.1", "127.0.0.2")) -> ClusterPlan:
    """127.0.0.0/8 all answers on lo, so two loopback addresses stand in for two machines."""
    return ClusterPlan(nodes=tuple(nodes), node_rank=rank, ifname="lo", device=DeviceSpec("cpu", tuple(range(nproc))),
                       port=port, job_id="t", peer_timeout=timeout, source="test", heartbeat_interval=0.5,
                       heartbeat_timeout=3)


@pytest.mark.multiproc
def test_the_meeting_passes_when_every_node_joins(etcd_endpoint):
    port = free_port()
    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    assert run_nodes(etcd_endpoint, *(node(r, port, nodes=nodes) for r in (2, 0, 1))) == [None, None, None]


@pytest.mark.multiproc
def test_the_meeting_names_the_missing_node_on_every_node_that_came(etcd_endpoint):
    port = free_port()
    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    results = run_nodes(etcd_endpoint, node(0, port, timeout=1, nodes=nodes), node(1, port, timeout=1, nodes=nodes))
    for result in results:
        assert result.startswith("node 2 (127.0.0.3) did not join within Train.peer_timeout=1s"), result


@pytest.mark.multiproc
def test_the_meeting_rejects_a_node_with_another_device_layout(etcd_endpoint):
    port = free_port()
    results = run_nodes(etcd_endpoint, node(0, port, nproc=2), node(1, port, nproc=1))
    assert results[0].startswith("node 1 (127.0.0.2) has number of processes per machine (Global.device ids) 1, "
                                 "node 0 has 2"), results[0]
    assert results[1] == results[0]


# --- ports: a busy port names the process that holds it -------------------------------------------------

@pytest.mark.multiproc
def test_a_busy_port_names_its_process(busy_port):
    from paddledist.cluster import ports

    port, pid = busy_port
    assert ports.bind_error(port) is not None and ports.bind_error(free_port()) is None
    found = dict(ports.holders(port))
    assert pid in found and HOLDER_MARK in found[pid]


# --- fingerprint: machines must agree on versions, config and dataset lists -----------------------------

@pytest.mark.unit
def test_fingerprint_leaves_out_per_node_keys_and_reads_dataset_lists(tmp_path):
    from paddledist.cluster.fingerprint import PER_NODE, fingerprint

    (tmp_path / "train.txt").write_text("a.png 0\n")
    facts = fingerprint(cfg(f"Global.dataset_dir={tmp_path}", "Global.output=/x", "Train.batch_size=32"))
    assert not PER_NODE & set(facts["config"])
    assert facts["config"]["Train.batch_size"][1] == "32"
    assert facts["data"]["train.txt"].startswith("sha256 ") and facts["data"]["val.txt"] == "missing"
    assert facts["versions"]["paddle"].startswith("paddlepaddle")
    same = fingerprint(cfg(f"Global.dataset_dir={tmp_path}", "Global.output=/elsewhere", "Train.batch_size=32"))
    assert same == facts


@pytest.mark.unit
def test_fingerprint_of_cifar_batches_is_their_sizes(tmp_path):
    from paddledist.cluster.fingerprint import data_digests

    (tmp_path / "data_batch_1").write_bytes(b"x" * 7)
    sizes = data_digests(str(tmp_path))
    assert sizes["data_batch_1"] == "7 bytes" and sizes["test_batch"] == "missing"
    assert data_digests("synthetic:64") == {"synthetic": "synthetic:64"}


def facts_for(tmp_path, name: str, labels: str, *overrides: str):
    from paddledist.cluster.fingerprint import fingerprint

    folder = tmp_path / name
    folder.mkdir()
    (folder / "train.txt").write_text(labels)
    return fingerprint(cfg(f"Global.dataset_dir={folder}", *overrides))


@pytest.mark.multiproc
def test_the_meeting_names_the_differing_config_key(tmp_path, etcd_endpoint):
    port = free_port()
    facts = [facts_for(tmp_path, "a", "x 0\n"), facts_for(tmp_path, "b", "x 0\n", "Train.learning_rate=0.1")]
    results = run_nodes(etcd_endpoint, node(0, port), node(1, port), facts=facts)
    assert ("node 1 (127.0.0.2) differs from node 0: config key Train.learning_rate is 0.1 there, 0.05 on node 0"
            in results[0]), results[0]
    assert results[1] == results[0]


@pytest.mark.multiproc
def test_the_meeting_names_the_differing_dataset_file_and_version(tmp_path, etcd_endpoint):
    port = free_port()
    facts = [facts_for(tmp_path, "a", "x 0\n"), facts_for(tmp_path, "b", "x 1\n")]
    facts[1]["versions"]["paddle"] = "paddlepaddle 0.0.1"
    results = run_nodes(etcd_endpoint, node(0, port), node(1, port), facts=facts)
    assert "paddle paddlepaddle 0.0.1 there" in results[0]
    assert "dataset file train.txt is sha256 " in results[0], results[0]
    assert "val.txt" not in results[0]  # missing on both: no difference


@pytest.mark.multiproc
def test_a_late_node_hears_the_same_verdict(etcd_endpoint):
    """The third machine comes 1.5 s after the others: the plan waits for it, then every machine gives the one
    verdict on node 1's device layout."""
    port = free_port()
    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    plans = [node(0, port, nodes=nodes), node(1, port, nproc=2, nodes=nodes), node(2, port, nodes=nodes)]
    results = run_nodes(etcd_endpoint, *plans, delays=(0, 0, 1.5))
    assert all(r.startswith("node 1 (127.0.0.2) has number of processes") for r in results), results


@pytest.mark.multiproc
def test_a_held_launcher_port_on_node_0_stops_every_node_at_once(etcd_endpoint):
    """Another job's paddle store holds Train.port + 1 on node 0: every machine refuses within seconds, with
    node 0's line, instead of waiting out Train.peer_timeout."""
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("", port + 1))
        busy.listen()
        started = time.monotonic()
        results = run_nodes(etcd_endpoint, node(0, port, timeout=60), node(1, port, timeout=60))
    assert time.monotonic() - started < 15
    for result in results:
        assert f"port {port + 1} (Train.port + 1) on node 0 (127.0.0.1) is in use" in result, result

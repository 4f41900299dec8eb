"""A Train.dist_ips pool (Train.nnodes=MIN:MAX with a machine list): the quorum check at start (one line, exit 2),
the plan it gives, and how the survivors' plan is re-formed from a loss verdict (cluster/pool.py). The namespace
runs are in tests/test_pool_multihost.py."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path

import pytest
from helpers.common import free_port
from helpers.loopback import LAN

from paddledist import cli
from paddledist.cluster import plan
from paddledist.cluster.pool import lost_in, next_plan, placed_on
from paddledist.cluster.poolmeet import Lobby, ask, meet, rejoin
from paddledist.cluster.sources import find_source
from paddledist.config import load
from paddledist.errors import UserError

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
THREE = "Train.dist_ips=10.0.0.1,10.0.0.2,10.0.0.3"


def pool_plan(node_ip: str = "10.0.0.2", ips: str = THREE, nnodes: str = "2:3"):
    return plan(load(None, [ips, f"Train.nnodes={nnodes}", f"Train.node_ip={node_ip}"]), local=LAN, env={})


def test_a_range_with_a_list_is_a_pool_of_the_listed_machines():
    source = find_source(load(None, [THREE, "Train.nnodes=2:3"]), {})
    assert (source.names, source.nnodes, source.min_nodes) == (("10.0.0.1", "10.0.0.2", "10.0.0.3"), 3, 2)
    p = pool_plan()
    assert (p.nodes, p.node_rank, p.min_nodes, p.agreed) == (("10.0.0.1", "10.0.0.2", "10.0.0.3"), 1, 2, True)
    assert find_source(load(None, [THREE, "Train.nnodes=3"]), {}).min_nodes == 0  # a count stays the whole list


@pytest.mark.parametrize("ips, nnodes, words", [
    ("10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4", "2:4", "MIN must be more than half of the list (a quorum, at least 3)"),
    ("10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4", "2:4", "use -o Train.nnodes=3:4"),
    ("10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6", "3:6", "at least 4"),
    ("10.0.0.1,10.0.0.2", "2:3", "Train.nnodes=2:3 but Train.dist_ips lists 2 machines; the list is the count (the "
                                 "pool with a range): use 2:2"),
    ("10.0.0.1,10.0.0.2,10.0.0.3", "2:4", "Train.dist_ips lists 3 machines"),
])
def test_no_quorum_or_another_count_is_refused_in_one_line(ips, nnodes, words):
    with pytest.raises(UserError) as e:
        find_source(load(None, [f"Train.dist_ips={ips}", f"Train.nnodes={nnodes}"]), {})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_quorum_holds_for_every_majority():
    for listed, least in ((3, 2), (4, 3), (5, 3), (6, 4)):
        ips = ",".join(f"10.0.0.{i}" for i in range(1, listed + 1))
        assert find_source(load(None, [f"Train.dist_ips={ips}", f"Train.nnodes={least}:{listed}"]), {}).min_nodes \
            == least


def test_a_four_machine_list_with_min_2_exits_2_at_start_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["-c", str(REPO / "configs" / "image_classification.yaml"), "-o",
                     "Train.dist_ips=10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4", "Train.nnodes=2:4", "--dry-run"],
                    mode="train", prog="tools/train.py")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("paddledist: error: Train.nnodes=2:4 with Train.dist_ips of 4 machines: MIN must be more "
                          "than half of the list"), err
    assert list(tmp_path.iterdir()) == []


def test_losing_the_first_machine_makes_the_first_live_one_the_hub():
    for me, rank in (("10.0.0.2", 0), ("10.0.0.3", 1)):
        left, line = next_plan(pool_plan(me), "node 0 (10.0.0.1) lost: its connection closed (its processes ended)")
        assert (left.nodes, left.node_rank, left.names, left.min_nodes) == \
            (("10.0.0.2", "10.0.0.3"), rank, ("10.0.0.2", "10.0.0.3"), 2)
        assert "dropping 10.0.0.1: re-forming on 2 machine(s) 10.0.0.2,10.0.0.3; 10.0.0.2 is the hub" in line


def test_losing_the_last_machine_keeps_the_hub_whichever_node_reports_it():
    hub, _ = next_plan(pool_plan("10.0.0.1"), "node 2 (10.0.0.3) lost: no heartbeat for 11s")
    other, _ = next_plan(pool_plan("10.0.0.2"), "node 2 (10.0.0.3) lost, reported by node 0: its connection closed")
    assert (hub.nodes, hub.node_rank) == (("10.0.0.1", "10.0.0.2"), 0)
    assert (other.nodes, other.node_rank) == (("10.0.0.1", "10.0.0.2"), 1)


def test_fewer_than_min_left_stops_and_other_causes_keep_the_plan():
    five = "Train.dist_ips=10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5"
    p = pool_plan(ips=five, nnodes="3:5")
    gone, line = next_plan(p, "node 0 (10.0.0.1) lost: x; node 3 (10.0.0.4) lost: y; node 4 (10.0.0.5) lost: z")
    assert gone is None and "2 of the listed machines left after losing 10.0.0.1, 10.0.0.4, 10.0.0.5, fewer than " \
        "Train.nnodes MIN=3" in line
    for cause in ("node 1 (10.0.0.2) stopped: rank 1 failed", "node 2 (10.0.0.9) lost: wrong address", None,
                  "node 1 (10.0.0.2) lost: this node itself is never dropped"):
        assert next_plan(p, cause) == (p, "")
    fixed = pool_plan(nnodes="3")
    assert next_plan(fixed, "node 0 (10.0.0.1) lost: x") == (fixed, "")  # no range: every machine, as before


def test_the_lost_addresses_are_read_from_the_verdict_words():
    p = pool_plan("10.0.0.1")
    assert lost_in("node 1 (10.0.0.2) lost: a; node 2 (10.0.0.3) lost, reported by node 0: b", p) == \
        ["10.0.0.2", "10.0.0.3"]


# --- the meeting between launches (cluster/poolmeet.py), on loopback addresses in threads -----------------------

def loop_plan(me: str, port: int, view: tuple = ()):
    """What plan() gives a listed machine of a 2:3 pool (its own address among the listed), on loopback."""
    listed = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    p = dataclasses.replace(pool_plan(), nodes=listed, names=listed, pool=listed, port=port, peer_timeout=5,
                            node_rank=listed.index(me))
    return placed_on(p, view) if view else p


def in_threads(**calls) -> dict:
    results: dict = {}

    def run(name, call):
        try:
            results[name] = call()
        except Exception as e:  # noqa: BLE001 - the test reads it
            results[name] = e

    threads = [threading.Thread(target=run, args=item) for item in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_a_returning_machine_waits_in_the_hubs_lobby_and_is_taken_in_at_the_restart():
    port = free_port()
    a, b = "127.0.0.1", "127.0.0.2"
    hub = loop_plan(a, port, (a, b))  # the pool re-formed without 127.0.0.3, which now comes back
    with Lobby() as lobby:
        lobby.open(hub)
        waiting = {}
        waiter = threading.Thread(target=lambda: waiting.update(c=rejoin(loop_plan("127.0.0.3", port))))
        history = [{"cause": "node 2 (127.0.0.3) lost: x", "epoch": 1, "nodes": 2}]
        waiter.start()
        time.sleep(1.0)  # it waits: the restart has not come yet
        assert waiter.is_alive()
        got = in_threads(a=lambda: meet(hub, lobby, history), b=lambda: ask(loop_plan(b, port, (a, b))))
        waiter.join(timeout=10)
    everyone = (a, b, "127.0.0.3")
    assert [(got["a"].nodes, got["a"].node_rank), (got["b"].nodes, got["b"].node_rank)] == [(everyone, 0),
                                                                                            (everyone, 1)]
    taken, restarts = waiting["c"]
    assert (taken.nodes, taken.node_rank, taken.names) == (everyone, 2, everyone)
    assert restarts == history  # the job's restarts so far: a returning machine may be the next rank 0


def test_a_machine_that_left_the_lobby_is_not_taken_in_and_nothing_running_means_start_as_listed():
    port = free_port()
    a, b = "127.0.0.1", "127.0.0.2"
    started = time.monotonic()
    alone = loop_plan("127.0.0.3", port)
    assert rejoin(alone) == (alone, []) and time.monotonic() - started < 2  # nobody listening: refused at once
    hub = loop_plan(a, port, (a, b))
    with Lobby() as lobby:
        lobby.open(hub)
        gone = socket.create_connection((a, port))
        gone.sendall(b'{"join": "127.0.0.3", "job": "paddledist"}\n')
        time.sleep(0.5)
        gone.close()
        got = in_threads(a=lambda: meet(hub, lobby), b=lambda: ask(loop_plan(b, port, (a, b))))
    assert got["a"].nodes == got["b"].nodes == (a, b), got


SECRET = b"pool-secret-0123456789abcdef"


def test_with_a_secret_the_lobby_takes_a_sealed_join_and_refuses_a_plain_or_misplaced_one(capfd):
    port = free_port()
    a, b = "127.0.0.1", "127.0.0.2"
    hub = dataclasses.replace(loop_plan(a, port, (a, b)), secret=SECRET)
    with Lobby() as lobby:
        lobby.open(hub)
        plain = socket.create_connection((a, port), source_address=("127.0.0.3", 0))
        plain.sendall(b'{"join": "127.0.0.3", "job": "paddledist"}\n')  # the right address, no secret
        waiting = {}
        waiter = threading.Thread(target=lambda: waiting.update(
            c=rejoin(dataclasses.replace(loop_plan("127.0.0.3", port), secret=SECRET))))
        waiter.start()
        time.sleep(1.0)
        got = in_threads(a=lambda: meet(hub, lobby),
                         b=lambda: ask(dataclasses.replace(loop_plan(b, port, (a, b)), secret=SECRET)))
        waiter.join(timeout=10)
        plain.close()
    everyone = (a, b, "127.0.0.3")
    assert got["a"].nodes == got["b"].nodes == waiting["c"][0].nodes == everyone, (got, waiting)
    assert "the pool's hub rejected a connection from 127.0.0.3: no job secret" in capfd.readouterr().err


def test_a_join_naming_another_address_is_refused_and_not_taken_in(capfd):
    port = free_port()
    a, b = "127.0.0.1", "127.0.0.2"
    hub = loop_plan(a, port, (a, b))
    with Lobby() as lobby:
        lobby.open(hub)
        impostor = socket.create_connection((a, port), source_address=("127.0.0.9", 0))
        impostor.sendall(b'{"join": "127.0.0.3", "job": "paddledist"}\n')
        time.sleep(0.5)
        got = in_threads(a=lambda: meet(hub, lobby), b=lambda: ask(loop_plan(b, port, (a, b))))
        impostor.close()
    assert got["a"].nodes == got["b"].nodes == (a, b), got
    assert ("the pool's hub rejected a connection from 127.0.0.9: it claims to be node 127.0.0.3 (127.0.0.3) but "
            "comes from another address") in capfd.readouterr().err


def test_after_the_pool_re_formed_the_stages_after_training_run_on_its_new_first_machine(monkeypatch):
    from paddledist.launch import stage

    cfg = load(None, [THREE, "Train.nnodes=2:3", "Train.node_ip=10.0.0.2"])
    monkeypatch.setattr(stage, "_LAST_POOL", [])
    assert not stage.is_first_machine(cfg, env={})  # as listed, 10.0.0.1 is first
    survivors = placed_on(pool_plan(), ("10.0.0.2", "10.0.0.3"))  # 10.0.0.1 lost: this machine is the hub now
    monkeypatch.setattr(stage, "_LAST_POOL", [survivors])
    assert stage.is_first_machine(cfg, env={})
    third = load(None, [THREE, "Train.nnodes=2:3", "Train.node_ip=10.0.0.3"])
    monkeypatch.setattr(stage, "_LAST_POOL", [placed_on(pool_plan("10.0.0.3"), ("10.0.0.2", "10.0.0.3"))])
    assert not stage.is_first_machine(third, env={})

"""Train.nnodes as an elastic range MIN:MAX (master-address mode): parsing and the one-line refusals, and the
preflight on loopback addresses continuing with the machines that came once Train.peer_timeout has passed."""

from __future__ import annotations

import dataclasses
import time

import pytest
from conftest import free_port
from test_cluster_sources import LAN, master_node, meet

from paddledist.cluster import plan
from paddledist.cluster.sources import find_source
from paddledist.config import NodeCount, load, parse_nnodes
from paddledist.errors import UserError

pytestmark = pytest.mark.unit



@pytest.mark.parametrize("value, expected", [
    (3, NodeCount(3, 3)), ("3", NodeCount(3, 3)), ("2:3", NodeCount(2, 3)), (" 2 : 4 ", NodeCount(2, 4)),
    ("2:2", NodeCount(2, 2)), (None, None)])
def test_counts_and_ranges_parse(value, expected):
    assert parse_nnodes(value) == expected
    assert expected is None or expected.elastic == (expected.least < expected.most)


@pytest.mark.parametrize("value, words", [
    ("3:2", "Train.nnodes=3:2: a range is MIN:MAX, the smaller count first; e.g. -o Train.nnodes=2:3"),
    ("0:2", "Train.nnodes must be >= 1, got 0:2"),
    ("1:3", "Train.nnodes=1:3: the low end of a range must be at least 2 machines"),
    ("a:b", "Train.nnodes='a:b' is not a machine count N or a range MIN:MAX"),
    ("2:3:4", "is not a machine count N or a range MIN:MAX"), ("-1", "is not a machine count"),
    ("0", "Train.nnodes must be >= 1")])
def test_bad_ranges_are_one_line(value, words):
    with pytest.raises(UserError) as e:
        load(None, [f"Train.nnodes={value}", "Train.dist_master=10.0.0.1:36543"])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_int_form_is_unchanged_and_a_range_gives_the_fewest():
    fixed = find_source(load(None, ["Train.dist_master=10.0.0.1:36543", "Train.nnodes=3"]), {})
    ranged = find_source(load(None, ["Train.dist_master=10.0.0.1:36543", "Train.nnodes=2:3"]), {})
    assert (fixed.nnodes, fixed.min_nodes) == (3, 0)
    assert (ranged.nnodes, ranged.min_nodes, ranged.master) == (3, 2, "10.0.0.1:36543")
    quoted = find_source(load(None, ["Train.dist_master=10.0.0.1:36543", "Train.nnodes='2:4'"]), {})
    assert (quoted.nnodes, quoted.min_nodes) == (4, 2)


def test_a_range_with_dist_ips_is_refused():
    with pytest.raises(UserError) as e:
        find_source(load(None, ["Train.dist_ips=10.0.0.1,10.0.0.2", "Train.nnodes=2:3"]), {})
    assert "a range of machines needs Train.dist_master" in str(e.value) and "\n" not in str(e.value)


def test_the_plan_keeps_the_range_on_node_0():
    p = plan(load(None, ["Train.dist_master=10.0.0.2:36543", "Train.nnodes=2:3"]), local=LAN, env={})
    assert (p.nnodes, p.min_nodes, p.node_rank, p.agreed) == (3, 2, 0, False)


def elastic(address: str, port: int, timeout: int) -> object:
    return dataclasses.replace(master_node(address, port, 3, timeout=timeout), min_nodes=2)


def test_two_of_three_continue_after_the_peer_timeout(capsys):
    port = free_port()
    started = time.monotonic()
    results = meet(elastic("127.0.0.1", port, 2), elastic("127.0.0.7", port, 2))
    waited = time.monotonic() - started
    nodes = ("127.0.0.1", "127.0.0.7")
    assert results == [(nodes, 0, True), (nodes, 1, True)], results
    assert 2 <= waited < 10, waited  # node 0 waited out Train.peer_timeout for the third machine, no longer
    assert "continuing with 2 of 3 machines (Train.nnodes=2:3" in capsys.readouterr().out


def test_every_machine_coming_needs_no_wait():
    port = free_port()
    started = time.monotonic()
    results = meet(elastic("127.0.0.1", port, 20), elastic("127.0.0.3", port, 20), elastic("127.0.0.2", port, 20))
    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    assert results == [(nodes, 0, True), (nodes, 2, True), (nodes, 1, True)]
    assert time.monotonic() - started < 10


def test_fewer_than_the_minimum_fails_naming_the_count():
    port = free_port()
    alone = dataclasses.replace(master_node("127.0.0.1", port, 4, timeout=1), min_nodes=3)
    joiner = dataclasses.replace(master_node("127.0.0.5", port, 4, timeout=1), min_nodes=3)
    results = meet(alone, joiner)
    assert results[0].startswith("only 2 of 4 machines came and Train.nnodes=3:4 needs at least 3: "
                                 "2 of 3 other machine(s) did not join"), results[0]
    assert results[1] == f"node 0 (127.0.0.1) reports: {results[0]}"


def test_a_fixed_count_still_waits_for_every_machine():
    port = free_port()
    results = meet(master_node("127.0.0.1", port, 3, timeout=1), master_node("127.0.0.4", port, 3, timeout=1))
    assert results[0].startswith("1 of 2 other machine(s) did not join within Train.peer_timeout=1s"), results[0]


def test_a_yaml_file_gives_the_count_or_a_quoted_range(tmp_path):
    for text, expected in (("3", NodeCount(3, 3)), ('"2:4"', NodeCount(2, 4))):
        path = tmp_path / "cfg.yaml"
        path.write_text(f"Global: {{model: LeNet}}\nTrain:\n  dist_master: 10.0.0.1:36543\n  nnodes: {text}\n")
        assert parse_nnodes(load(str(path), []).Train.nnodes) == expected

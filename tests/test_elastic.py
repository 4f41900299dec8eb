"""Train.nnodes as an elastic range MIN:MAX (master-address mode): parsing and the one-line refusals, and the
meeting in a real etcd on loopback addresses continuing with the machines that came once Train.peer_timeout
has passed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.common import free_port
from helpers.loopback import LAN, master_node, meet

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


def test_the_plan_keeps_the_range_on_node_0():
    p = plan(load(None, ["Train.dist_master=10.0.0.2:36543", "Train.nnodes=2:3"]), local=LAN, env={})
    assert (p.nnodes, p.min_nodes, p.node_rank, p.agreed) == (3, 2, 0, False)


def elastic(address: str, port: int, timeout: int) -> object:
    return dataclasses.replace(master_node(address, port, 3, timeout=timeout), min_nodes=2)


@pytest.mark.multiproc
def test_two_of_three_continue_after_the_peer_timeout(capsys, etcd_endpoint):
    port = free_port()
    started = time.monotonic()
    results = meet(etcd_endpoint, elastic("127.0.0.1", port, 2), elastic("127.0.0.7", port, 2))
    waited = time.monotonic() - started
    nodes = ("127.0.0.1", "127.0.0.7")
    assert results == [(nodes, 0, True), (nodes, 1, True)], results
    assert 2 <= waited < 10, waited  # the machines waited out Train.peer_timeout for the third one, no longer
    assert "continuing with 2 of 3 machines (Train.nnodes=2:3" in capsys.readouterr().out


@pytest.mark.multiproc
def test_every_machine_coming_needs_no_wait(etcd_endpoint):
    port = free_port()
    started = time.monotonic()
    results = meet(etcd_endpoint, elastic("127.0.0.1", port, 20), elastic("127.0.0.3", port, 20),
                   elastic("127.0.0.2", port, 20))
    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    assert results == [(nodes, 0, True), (nodes, 2, True), (nodes, 1, True)]
    assert time.monotonic() - started < 10


@pytest.mark.multiproc
def test_fewer_than_the_minimum_fails_naming_the_count(etcd_endpoint):
    port = free_port()
    alone = dataclasses.replace(master_node("127.0.0.1", port, 4, timeout=1), min_nodes=3)
    joiner = dataclasses.replace(master_node("127.0.0.5", port, 4, timeout=1), min_nodes=3)
    results = meet(etcd_endpoint, alone, joiner)
    assert results[0].startswith("only 2 of 4 machines came and Train.nnodes=3:4 needs at least 3: "
                                 "2 of 4 machine(s) did not join"), results[0]
    assert results[1] == results[0]


@pytest.mark.multiproc
def test_a_fixed_count_still_waits_for_every_machine(etcd_endpoint):
    port = free_port()
    results = meet(etcd_endpoint, master_node("127.0.0.1", port, 3, timeout=1),
                   master_node("127.0.0.4", port, 3, timeout=1))
    assert results[0].startswith("1 of 3 machine(s) did not join within Train.peer_timeout=1s"), results[0]


def test_a_yaml_file_gives_the_count_or_a_range_quoted_or_not(tmp_path):
    """Unquoted, YAML 1.1 reads 2:4 as the base-60 number 124; our loader reads it as written."""
    for text, expected in (("3", NodeCount(3, 3)), ('"2:4"', NodeCount(2, 4)), ("2:4", NodeCount(2, 4))):
        path = tmp_path / "cfg.yaml"
        path.write_text(f"Global: {{model: LeNet}}\nTrain:\n  dist_master: 10.0.0.1:36543\n  nnodes: {text}\n")
        assert parse_nnodes(load(str(path), []).Train.nnodes) == expected


REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def outputs(tmp_path):
    """An output folder as a preempted 1-process run leaves it: latest saved at step 5 of epoch `done + 1` (a
    global batch of Train.batch_size), and epoch_<done> when `with_epoch`; real LeNet checkpoints."""
    from paddledist.engine import checkpoint
    from paddledist.models import build_model

    lenet = {k: v.numpy() for k, v in build_model("LeNet", 10, 32).state_dict().items()}

    def make(done: int, with_epoch: bool, batch: int = 32) -> Path:
        out, opt = tmp_path / f"out{done}{with_epoch}", {"m": np.zeros(1)}
        if with_epoch:
            states = {"epoch": done, "step_in_epoch": 0, "global_batch": batch}
            checkpoint.save(str(out), f"epoch_{done}", lenet, opt, states, link=False)
        states = {"epoch": done, "step_in_epoch": 5, "global_batch": batch}
        checkpoint.save(str(out), "latest", lenet, opt, states, link=True)
        return out
    return make


def resumed(out: Path, world_size: int, resume: str = "auto", *extra: str):
    from paddledist.engine.distenv import DistEnv
    from paddledist.stages import train_checks

    cfg = load(str(REPO / "configs" / "image_classification.yaml"),
               [f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", f"Global.output={out}", "Train.batch_size=32",
                f"Train.resume_path={resume}", *extra])
    return train_checks.preflight(cfg, DistEnv(world_size=world_size))[2]


@pytest.mark.models
def test_a_mid_epoch_latest_on_another_global_batch_starts_that_epoch_again(outputs, capsys):
    """Another world size keeps the global batch (engine/batchplan.py), so the step continues; another
    Train.global_batch_size starts the interrupted epoch again."""
    out = outputs(2, with_epoch=True)
    same = resumed(out, 1)
    assert same.path.endswith("latest.pdparams") and same.states["step_in_epoch"] == 5
    more = resumed(out, 2)
    assert more.path.endswith("latest.pdparams") and more.states["step_in_epoch"] == 5
    fewer = resumed(out, 2, "auto", "Train.global_batch_size=64")
    assert fewer.path == str(out / "epoch_2" / "epoch_2.pdparams") and fewer.states["step_in_epoch"] == 0
    assert ("was saved at step 5 of epoch 3 with a global batch of 32 samples, this run has 64; a mid-epoch "
            f"checkpoint continues only at its own global batch: starting epoch 3 again from {out}/epoch_2") \
        in capsys.readouterr().out
    assert resumed(outputs(0, with_epoch=False), 2, "auto", "Train.global_batch_size=64") is None
    assert "starting epoch 1 again from the beginning" in capsys.readouterr().out


@pytest.mark.models
def test_without_the_epoch_checkpoint_or_with_a_given_path_it_is_refused(outputs):
    with pytest.raises(UserError) as e:
        resumed(outputs(2, with_epoch=False), 2, "auto", "Train.global_batch_size=64")
    assert "and there is no " in str(e.value) and "to start epoch 3 again from" in str(e.value)
    out = outputs(1, with_epoch=True)
    with pytest.raises(UserError) as e:
        resumed(out, 2, str(out / "latest" / "latest.pdparams"), "Train.global_batch_size=64")
    assert "resume a mid-epoch checkpoint with the same Train.batch_size" in str(e.value)
    assert "\n" not in str(e.value)

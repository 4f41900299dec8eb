"""A Train.dist_ips pool (Train.nnodes=MIN:MAX with a machine list): the quorum check at start (one line, exit 2),
the plan it gives, and the stages after training following rank 0 to the re-formed pool's first machine. How
the pool re-forms in etcd: tests/test_etcd_meeting.py; the namespace runs: tests/test_pool_multihost.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.loopback import LAN

from paddledist import cli
from paddledist.cluster import plan
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


def test_after_the_pool_re_formed_the_stages_after_training_run_on_its_new_first_machine():
    from paddledist.launch import stage

    cfg = load(None, [THREE, "Train.nnodes=2:3", "Train.node_ip=10.0.0.2"])
    assert not stage.is_first_machine(cfg, env={})  # as listed, 10.0.0.1 is first
    survivors = placed_on(pool_plan(), ("10.0.0.2", "10.0.0.3"))  # 10.0.0.1 lost: this machine is rank 0 now
    assert stage.is_first_machine(cfg, env={}, last=survivors)
    third = load(None, [THREE, "Train.nnodes=2:3", "Train.node_ip=10.0.0.3"])
    assert not stage.is_first_machine(third, env={}, last=placed_on(pool_plan("10.0.0.3"), ("10.0.0.2", "10.0.0.3")))
    other = load(None, ["Train.dist_ips=10.0.0.2,10.0.0.3", "Train.node_ip=10.0.0.3"])
    assert not stage.is_first_machine(other, env={}, last=survivors)  # another pool's plan is not followed


def placed_on(plan, nodes: tuple):
    """`plan` as the etcd meeting places it on `nodes` (meeting._placed)."""
    from paddledist.cluster.meeting import _placed
    return _placed(plan, nodes)

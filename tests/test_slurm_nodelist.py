"""Slurm node-list expansion (a pure function) and SLURM_* -> nodes and this node's index."""

from __future__ import annotations

import pytest

from paddledist.cluster.slurm import expand_nodelist, slurm_nodes
from paddledist.errors import UserError

pytestmark = pytest.mark.unit

CASES = [
    ("node1", ("node1",)),
    ("node[01-02]", ("node01", "node02")),
    ("node[01-04,07]", ("node01", "node02", "node03", "node04", "node07")),
    ("node[8-11]", ("node8", "node9", "node10", "node11")),
    ("node[098-101]", ("node098", "node099", "node100", "node101")),
    ("a[1-2],b3,c[5]", ("a1", "a2", "b3", "c5")),
    ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
    ("gpu-a100-[1,3]", ("gpu-a100-1", "gpu-a100-3")),
    (" x[1-1] ", ("x1",)),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_expands_like_slurm(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize("text", ["node[1-", "node1]", "node[a-b]", "node[3-1]", "a,,b", "node[[1]]", "n[1-]"])
def test_malformed_lists_are_rejected(text):
    with pytest.raises(ValueError):
        expand_nodelist(text)


def test_srun_environment_gives_nodes_and_index():
    env = {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2", "SLURM_NODEID": "1"}
    assert slurm_nodes(env) == (("node01", "node02"), 1)
    assert slurm_nodes({}) is None


@pytest.mark.parametrize("env,shown", [
    ({"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "3", "SLURM_NODEID": "0"}, "SLURM_NNODES=3"),
    ({"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2", "SLURM_NODEID": "2"}, "SLURM_NODEID='2'"),
    ({"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2"}, "SLURM_NODEID=None"),
    ({"SLURM_JOB_NODELIST": "node[01-", "SLURM_NNODES": "2", "SLURM_NODEID": "0"}, "cannot be read"),
])
def test_inconsistent_slurm_variables_are_user_errors(env, shown):
    with pytest.raises(UserError, match=shown.replace("[", r"\[")):
        slurm_nodes(env)

"""benchmarks/chaos.py's code with 3 faults and a fixed seed on 3 namespace hosts: the job takes a supervisor killed
and run again, a link cut past Train.heartbeat_timeout and a killed rank, one after another, detects and
recovers from each (read from the supervisor's restart lines and the train log), finishes with done_flag and
ends with the parameters of an uninterrupted run. Needs root (namespaces, mount); skipped otherwise."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from helpers.common import unavailable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import chaos  # noqa: E402

pytestmark = pytest.mark.multihost

SEED = 1  # supervisor on host 2, cut on host 2, worker on host 0


def test_three_faults_in_sequence_are_detected_recovered_and_end_exact(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        unavailable("chaos needs root and iproute2 (namespaces, tmpfs)")
    assert [f.kind for f in chaos.plan(3, 3, SEED)[0]] == ["supervisor", "cut", "worker"]
    got = chaos.chaos(3, 3, SEED, tmp_path)
    assert got["exit_codes"] == {0: 0, 1: 0, 2: 0} and got["done_flag"] is True, got
    assert got["restarts"] == 3 and len(got["faults"]) == 3, got
    for row in got["faults"]:
        assert row["detected_s"] is not None and row["recovered_s"] >= row["detected_s"], row
        assert row["redone"] >= 0, row
    assert "lost" in got["faults"][0]["cause"] and "exit code -9" in got["faults"][2]["cause"], got["faults"]
    assert got["max_abs_difference"] <= 1e-5, got["max_abs_difference"]

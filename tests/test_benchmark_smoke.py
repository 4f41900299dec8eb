"""The benchmarks run end to end at a tiny size (scaling.py with its JSON summary, control_plane.py on a real
etcd); no timing asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parent.parent


def test_scaling_benchmark_tiny_run_prints_its_summary():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scaling.py"), "--tiny", "--nproc", "2",
                           "--quiet-wait", "0", "--max-foreign", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("efficiency", "ceiling_images_per_sec", "dp_images_per_sec", "raw_paddle_images_per_sec"):
        assert summary[key] > 0, key
    assert summary["ranks"] == 2 and summary["batch_per_rank"] == 4
    # N x the slower process is at most the sum of both: against it, data parallel can only look better.
    assert summary["efficiency_vs_slowest_process"] >= summary["efficiency"] > 0
    assert "| (c) paddledist, 2 ranks" in done.stdout


def test_startup_overhead_compares_launches_of_the_same_kind():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_procs import startup_overhead

    clean_and_retried = {"bare": [(4.0, False), (7.1, True), (4.4, False)], "pd": [(4.9, False), (7.9, True)]}
    assert startup_overhead(clean_and_retried)["overhead_s"] == 0.7  # medians of the clean runs: 4.2 vs 4.9
    # All bare launches hit paddle's 3 s retry and only some paddledist ones: compare the retried ones.
    bare_retried = {"bare": [(7.5, True), (7.3, True)], "pd": [(4.0, False), (8.0, True)]}
    assert startup_overhead(bare_retried) == {"bare_launch_s": 7.4, "paddledist_s": 8.0, "overhead_s": 0.6,
                                              "compared": "runs with the store retry"}
    assert startup_overhead({"bare": [(7.5, True)], "pd": [(4.0, False)]}) is None


ONEDNN_SMOKE = ["dygraph fp32", "static fp32, FLAGS_use_onednn=1, avg-pool stem"]
"""A dygraph and a static oneDNN variant (all eight take ~2.5 min; the benchmark itself runs them all)."""


def test_onednn_probe_reports_the_variants_and_counts_primitives():
    only = [a for name in ONEDNN_SMOKE for a in ("--only", name)]
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "onednn_training.py"), "--steps", "4", *only],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(results) == ONEDNN_SMOKE
    for name, r in results.items():
        assert r.get("ms", 0) > 0 or r.get("error"), name  # a step time, or why the variant could not train
    assert results["dygraph fp32"]["ms"] > 0
    # ONEDNN_VERBOSE is parsed: some static-graph variant with FLAGS_use_onednn=1 ran oneDNN primitives.
    assert max(r.get("onednn_per_step", 0) for r in results.values()) > 0


def test_the_control_plane_benchmark_meets_names_a_loss_and_stops_on_a_real_etcd():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "control_plane.py"), "--nodes", "3",
                           "--window", "1", "--interval", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["nodes"] == 3 and row["loss_named"] is True, row
    for key in ("join_s", "detect_s", "stop_s", "hub_cpu", "members_rss_mb"):
        assert row[key] >= 0, key
    assert row["members_rss_mb"] > 0

"""benchmarks/scaling.py runs end to end at a tiny size and ends with its JSON summary (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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

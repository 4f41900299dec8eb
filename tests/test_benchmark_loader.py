"""benchmarks/loader_vs_train.py runs end to end at a tiny size: its JPEG ClsDataset is one paddledist reads,
and the summary holds positive rates (no timing asserted: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "loader_vs_train.py"

pytestmark = pytest.mark.bench


def test_loader_benchmark_tiny_run_prints_positive_rates():
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "PP-LCNet_x0_25", "--size", "64", "--batch", "4",
                           "--workers", "1", "--steps", "2", "--images", "12", "--quick"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["model"] == "PP-LCNet_x0_25" and summary["size"] == 64 and summary["workers"] == 1
    for key in ("loader_images_per_sec", "train_images_per_sec", "ratio"):
        assert summary[key] > 0, key
    assert summary["ratio"] == pytest.approx(summary["loader_images_per_sec"] / summary["train_images_per_sec"],
                                             rel=0.02)
    assert "| PP-LCNet_x0_25" in done.stdout


def test_made_dataset_is_a_clsdataset_of_varied_jpegs(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    from loader_vs_train import make_dataset

    from paddledist.data.formats import detect_format, load_samples

    make_dataset(str(tmp_path), 10)
    assert detect_format(str(tmp_path)) == "cls"
    train, val = load_samples(str(tmp_path), "train"), load_samples(str(tmp_path), "val")
    assert (len(train), len(val)) == (9, 1)
    shapes = {train.read(i).shape for i in range(len(train))}
    assert len(shapes) > 1 and all(300 <= min(h, w) and max(h, w) < 640 and c == 3 for h, w, c in shapes)
    assert all(p.endswith(".jpg") for p in train.paths)
    # photo-like, not noise: neighbouring pixels are close (noise would differ by ~85 on average)
    image = train.read(0).astype(np.int16)
    assert np.abs(np.diff(image, axis=1)).mean() < 20

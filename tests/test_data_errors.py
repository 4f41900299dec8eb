"""An image that fails to decode during training is counted and reported, never replaced by another sample;
past Train.max_bad_samples the job stops with the list. Real runs through tools/train.py on a small copy of
the bundled digits with one truncated PNG: its header is intact (it opens, so a header-only check passes it),
its pixels are not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "dataset" / "digits"
CONFIG = REPO / "configs" / "image_classification.yaml"


@pytest.fixture
def broken_digits(tmp_path) -> tuple[Path, str]:
    """Digits with 240 training and 60 validation images, one training PNG truncated: (folder, its list entry)."""
    root = tmp_path / "digits"
    (root / "images").mkdir(parents=True)
    (root / "label.txt").write_text((DIGITS / "label.txt").read_text())
    for split, count in (("train", 240), ("val", 60)):
        rows = (DIGITS / f"{split}.txt").read_text().split("\n")[:count]
        for row in rows:
            rel = row.split()[0]
            (root / rel).write_bytes((DIGITS / rel).read_bytes())
        (root / f"{split}.txt").write_text("\n".join(rows) + "\n")
    rel = (root / "train.txt").read_text().split("\n")[17].split()[0]
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(data[: len(data) // 2])
    with Image.open(root / rel) as img:  # the header still reads...
        assert img.size[0] > 0
    with pytest.raises(OSError), Image.open(root / rel) as img:  # ...the pixels do not
        img.convert("RGB")
    return root, f"train.txt:18 {rel}"


def train(tmp_path: Path, data: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(CONFIG), "-o",
                           f"Global.dataset_dir={data}", f"Global.output={tmp_path / 'out'}", "Train.batch_size=32",
                           "Train.epochs_iters=2", *overrides], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_below_the_limit_the_broken_image_is_left_out_and_reported(tmp_path, broken_digits):
    data, entry = broken_digits
    done = train(tmp_path, data, "Train.max_bad_samples=1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "train_result.json").read_text())
    assert result["bad_sample_count"] == 1, result["bad_samples"]  # counted once, though read in both epochs
    assert result["bad_samples"][0].endswith(entry)
    log = (tmp_path / "out" / "logs" / "train.rank0.log").read_text()
    assert "1 training image(s) could not be decoded and were left out, not replaced" in log
    assert entry in log


def test_past_the_limit_every_rank_stops_with_the_list(tmp_path, broken_digits):
    data, entry = broken_digits
    done = train(tmp_path, data, "Train.max_bad_samples=0", "Global.device=cpu:0,1")
    assert done.returncode != 0, done.stdout[-3000:]
    assert "images failed to decode (Train.max_bad_samples=0)" in done.stderr, done.stderr[-3000:]
    assert entry in done.stderr
    assert not (tmp_path / "out" / "latest").exists()  # stopped in epoch 1, before any checkpoint

"""Resuming with another global batch (batch size, world size, accumulation) continues the learning-rate schedule
by progress (epochs done = samples seen), not by the saved update count: the real CLI trains 2 epochs at batch
64, then resumes epoch 2 from epoch_1 at batch 16 (4x the updates per epoch). The schedule must then be halfway
through its cosine at the first update of epoch 2 and end at 0, as a run at batch 16 from the start would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paddledist.engine.schedule import lr_factor, resume_step

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "image_classification.yaml"
DIGITS = REPO / "dataset" / "digits"
LR = 0.05
LINE = re.compile(r"epoch (\d+)/\d+ iter (\d+)/(\d+) loss \S+ lr (\S+)")


def train(out: Path, *overrides: str) -> list[tuple[int, int, int, float]]:
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(CONFIG), "-o",
                           f"Global.dataset_dir={DIGITS}", f"Global.output={out}", "Train.epochs_iters=2",
                           f"Train.learning_rate={LR}", "Train.warmup_steps=0", "Train.log_interval=1", "Train.save_interval=1", *overrides],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [(int(e), int(i), int(n), float(lr)) for e, i, n, lr in LINE.findall(done.stdout)], done.stdout


def test_resume_at_another_batch_continues_by_progress(tmp_path):
    first, _ = train(tmp_path / "a", "Train.batch_size=64")
    steps_before = first[-1][2]
    resumed, text = train(tmp_path / "b", "Train.batch_size=16",
                          f"Train.resume_path={tmp_path / 'a' / 'epoch_1' / 'epoch_1.pdparams'}")
    assert {e for e, _, _, _ in resumed} == {2}
    per_epoch = resumed[0][2]
    assert per_epoch >= 4 * steps_before - 4  # really another number of updates per epoch
    total = 2 * per_epoch
    # The log shows the rate after the step's scheduler update: iteration i of epoch 2 is update per_epoch + i.
    for _, i, _, lr in resumed:
        assert lr == pytest.approx(LR * lr_factor(resume_step(1, per_epoch) + i, total, 0), abs=1.1e-5)
    assert resumed[0][3] == pytest.approx(LR * 0.5, abs=LR * 4 / per_epoch)  # halfway, not back near the peak
    assert resumed[-1][3] == pytest.approx(0.0, abs=1e-6)
    assert f"the learning-rate schedule continues at update {per_epoch}" in text


def test_resume_step_is_the_epochs_done_at_todays_updates():
    assert resume_step(0, 23) == 0
    assert resume_step(3, 23) == 69

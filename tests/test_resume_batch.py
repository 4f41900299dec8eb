"""Resuming on another rank count or batch size.

By default the run keeps its global batch (engine/batchplan.py): a 2-process run resumed on 1 process
accumulates 2 micro-batches per update, so the learning rate at every update (= sample count) and the final
parameters are the uninterrupted run's. Asked for another global batch (Train.global_batch_size), the schedule
continues by progress (epochs done = samples seen), not by the saved update count: the real CLI trains 2 epochs
at batch 64, then resumes epoch 2 from epoch_1 at a global batch of 16 (4x the updates per epoch); the schedule
is then halfway through its cosine at the first update of epoch 2 and ends at 0."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
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
                           f"Train.learning_rate={LR}", "Train.warmup_steps=0", "Train.log_interval=1",
                           "Train.save_interval=1", *overrides],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [(int(e), int(i), int(n), float(lr)) for e, i, n, lr in LINE.findall(done.stdout)], done.stdout


def test_resume_at_another_global_batch_continues_by_progress(tmp_path):
    first, _ = train(tmp_path / "a", "Train.batch_size=64")
    steps_before = first[-1][2]
    resumed, text = train(tmp_path / "b", "Train.batch_size=16", "Train.global_batch_size=16",
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


def lr_by_update(out: Path) -> dict[int, float]:
    """The learning rate after each update, as VisualDL recorded it (float32, the scheduler's own value)."""
    from visualdl import LogReader

    rates = {}
    for log in sorted((out / "vdl_log").glob("vdlrecords.*.log")):
        rates.update((r.id, r.value) for r in LogReader(file_path=str(log)).get_data("scalar", "train/lr"))
    return rates


def params(path: Path) -> dict:
    import paddle

    return {k: v.numpy() for k, v in paddle.load(str(path)).items()}


def test_two_ranks_resumed_on_one_keep_the_global_batch_the_schedule_and_the_math(tmp_path):
    pytest.importorskip("visualdl", reason='VisualDL records the rates: pip install -e ".[vdl]" (CI installs it)')
    same = ("Train.batch_size=32", "Train.epochs_iters=3", "Train.warmup_steps=1", "Train.augment=false",
            "Train.visualdl=true")
    whole, _ = train(tmp_path / "a", *same, "Global.device=cpu:0,1")
    resumed, text = train(tmp_path / "b", *same, f"Train.resume_path={tmp_path / 'a' / 'epoch_1' / 'epoch_1.pdparams'}")
    assert "keeping the global batch of 64 samples (the resumed checkpoint's) on 1 rank(s): per-rank batch 32, " \
           "accumulation 2" in text
    before, after = lr_by_update(tmp_path / "a"), lr_by_update(tmp_path / "b")
    assert len(after) >= 2 * whole[-1][2] - 1 and max(after) == max(before)  # epochs 2-3, to the same last update
    for update, rate in after.items():
        assert rate == pytest.approx(before[update], abs=1e-7), update
    assert after[max(after)] == pytest.approx(0.0, abs=1e-7)
    result = json.loads((tmp_path / "b" / "train_result.json").read_text())
    assert result["global_batch_size"] == 64
    want, got = (params(tmp_path / run / "latest" / "latest.pdparams") for run in ("a", "b"))
    assert max(float(np.abs(want[k] - got[k]).max()) for k in want) <= 1e-5

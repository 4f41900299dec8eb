"""A single-process job preempts like a supervised one: SIGTERM to tools/train.py saves latest at the next
update (mid-epoch) and exits 75 with no paddle FatalError block; the same command with Train.resume_path=auto
finishes with the parameters of an uninterrupted run (augmentation off)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.multiproc


def train(tmp_path: Path, out: str, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" / "image_classification.yaml"),
            "-o", "Train.epochs_iters=4", "Train.augment=False", "Train.uniform_output_enabled=false",
            f"Global.output={tmp_path / out}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", *extra]
    return subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def final_params(folder: Path) -> dict:
    import paddle

    return {k: v.numpy() for k, v in paddle.load(str(folder / "latest" / "latest.pdparams")).items()}


def test_sigterm_saves_latest_at_the_step_and_resuming_matches_an_uninterrupted_run(tmp_path):
    whole = train(tmp_path, "whole")
    assert whole.wait(timeout=300) == 0, whole.stderr.read()[-3000:]
    job = train(tmp_path, "cut")
    deadline = time.monotonic() + 240
    while not (tmp_path / "cut" / "train_result.json").exists():  # one epoch done: now a mid-epoch step
        assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()[-3000:]
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 75, out[-2000:] + err[-2000:]
    assert "preemption (signal 15): saving latest at the next step" in out and "FatalError" not in err + out
    info = json.loads((tmp_path / "cut" / "latest" / "latest.info.json").read_text())
    assert info["step_in_epoch"] > 0, info  # saved at the step, not at an epoch's end
    resumed = train(tmp_path, "cut", "Train.resume_path=auto")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-2000:] + err[-2000:]
    assert json.loads((tmp_path / "cut" / "train_result.json").read_text())["done_flag"] is True
    got, want = final_params(tmp_path / "cut"), final_params(tmp_path / "whole")
    assert max(float(np.abs(got[k] - want[k]).max()) for k in want) <= 1e-6

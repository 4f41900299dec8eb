"""evaluate through tools/eval.py: the train stage's numbers reproduced exactly, on one process and on two
through the real launcher, and missing or unfitting weights named by their key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DIGITS = REPO / "dataset" / "digits"
VAL_SIZE = sum(1 for line in (DIGITS / "val.txt").read_text().splitlines() if line.strip())


def tool(script: str, *overrides: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(REPO / "tools" / script), "-c", CONFIG,
            "-o", f"Global.dataset_dir={DIGITS}", *overrides]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One short training run shared by this module's tests (its output folder)."""
    out = tmp_path_factory.mktemp("trained")
    done = tool("train.py", f"Global.output={out}", "Train.epochs_iters=2", cwd=out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_evaluate_reproduces_the_train_stage_best_top1(trained):
    done = tool("eval.py", f"Global.output={trained}", cwd=trained)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r, train = read(trained / "evaluate_result.json"), read(trained / "train_result.json")
    assert abs(r["top1"] - train["best"]["top1"]) < 0.005
    assert r["num_samples"] == VAL_SIZE and r["world_size"] == 1 and r["done_flag"] is True
    assert r["weight_path"] == str(trained / "best_model" / "best_model.pdparams")
    assert r["metrics"] == {"val.top1": r["top1"], "val.top5": r["top5"]} and r["top5"] >= r["top1"]
    assert f"on {VAL_SIZE} samples" in (trained / "logs" / "evaluate.rank0.log").read_text()


def test_two_processes_count_every_sample_once_and_agree_exactly(trained, tmp_path):
    weights = f"Evaluate.weight_path={trained}/latest/latest.pdparams"
    single = tool("eval.py", f"Global.output={tmp_path / 'one'}", weights, cwd=tmp_path)
    double = tool("eval.py", f"Global.output={tmp_path / 'two'}", weights, "Global.device=cpu:0,1",
                  "Train.batch_size=50", cwd=tmp_path)
    assert single.returncode == 0 and double.returncode == 0, double.stdout[-3000:] + double.stderr[-3000:]
    one, two = read(tmp_path / "one" / "evaluate_result.json"), read(tmp_path / "two" / "evaluate_result.json")
    assert (two["world_size"], two["num_samples"], one["num_samples"]) == (2, VAL_SIZE, VAL_SIZE)
    assert (two["top1"], two["top5"]) == (one["top1"], one["top5"])
    assert (tmp_path / "two" / "logs" / "evaluate.rank1.log").exists()


def test_missing_weights_name_the_key_and_write_nothing(tmp_path):
    out = tmp_path / "empty"
    done = tool("eval.py", f"Global.output={out}", cwd=tmp_path)
    assert done.returncode == 2
    assert "paddledist: error: Evaluate.weight_path: file not found: " in done.stderr and "train first" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
    done = tool("eval.py", f"Global.output={out}", f"Evaluate.weight_path={tmp_path}/nope.pdparams", cwd=tmp_path)
    assert done.returncode == 2 and f"Evaluate.weight_path: file not found: {tmp_path}/nope.pdparams" in done.stderr


def test_weights_of_another_class_count_are_refused(trained, tmp_path):
    weights = f"Evaluate.weight_path={trained}/best_model/best_model.pdparams"
    done = tool("eval.py", f"Global.output={tmp_path / 'o'}", weights, "Train.num_classes=12", cwd=tmp_path)
    assert done.returncode == 2 and "does not fit Global.model=LeNet with Train.num_classes=12" in done.stderr
    assert not (tmp_path / "o").exists()

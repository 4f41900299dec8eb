"""The list form of Global.mode through tools/main.py: several stages in one command, in order, stopping at the
first failure with its exit code."""

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
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DIGITS = REPO / "dataset" / "digits"


def main(*overrides: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(REPO / "tools" / "main.py"), "-c", CONFIG, "-o", *overrides]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.fixture(scope="module")
def four_stages(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("pipeline")
    done = main("Global.mode=[check_dataset,train,evaluate,export]", f"Global.output={out}",
                f"Global.dataset_dir={DIGITS}", "Train.epochs_iters=2", cwd=out)
    return out, done


def test_four_stages_run_in_one_command(four_stages):
    out, done = four_stages
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check = json.loads((out / "check_dataset_result.json").read_text())
    train = json.loads((out / "train_result.json").read_text())
    evaluated = json.loads((out / "evaluate_result.json").read_text())
    assert check["done_flag"] and train["done_flag"] and evaluated["done_flag"]
    assert abs(evaluated["top1"] - train["best"]["top1"]) < 0.005 and evaluated["num_samples"] == 359
    assert (out / "inference" / "inference.yml").is_file() and (out / "inference" / "inference.pdiparams").is_file()
    stdout = done.stdout
    assert stdout.index("check_dataset: passed") < stdout.index("eval epoch 1") < stdout.index("evaluate: top1")
    assert stdout.index("evaluate: top1") < stdout.index("paddledist: export:")


def test_export_then_predict_as_a_list(four_stages, tmp_path):
    out, _ = four_stages
    images = tmp_path / "images"
    images.mkdir()
    for name in ("0004.png", "0005.png", "0006.png"):
        (images / name).symlink_to(DIGITS / "images" / name)
    done = main("Global.mode=export,predict", f"Global.output={out}", f"Global.dataset_dir={DIGITS}",
                f"Predict.input={images}", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = json.loads((out / "predict_result.json").read_text())
    assert [Path(e["input"]).name for e in entries] == ["0004.png", "0005.png", "0006.png"]


def test_a_failing_stage_stops_the_list_with_its_exit_code(tmp_path):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(data / "images" / "a.png")
    (data / "label.txt").write_text("".join(f"{i} {i}\n" for i in range(10)))
    (data / "train.txt").write_text("images/a.png 0\nimages/missing.png 1\n")
    (data / "val.txt").write_text("images/a.png 0\n")
    out = tmp_path / "out"
    done = main("Global.mode=[check_dataset,train]", f"Global.output={out}", f"Global.dataset_dir={data}", cwd=tmp_path)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "train.txt:2: images/missing.png: file not found" in done.stderr
    assert json.loads((out / "check_dataset_result.json").read_text())["done_flag"] is False
    assert not (out / "train_result.json").exists() and "epoch 1" not in done.stdout

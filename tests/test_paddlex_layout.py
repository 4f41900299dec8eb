"""PaddleX's output layout from a short real training run: <name>.info.json in every checkpoint folder,
inference/ beside each checkpoint exactly when Train.uniform_output_enabled, train_result.json's paths point at
files that exist, and Global.export_with_pir / FLAGS_json_format_model choose the program format as PaddleX 3.7."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "dataset" / "digits"

pytestmark = pytest.mark.multiproc


def train(out: Path, *overrides: str, env: dict | None = None) -> dict:
    argv = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs/image_classification.yaml"),
            "-o", f"Global.dataset_dir={DIGITS}", f"Global.output={out}", "Train.epochs_iters=1",
            "Train.save_interval=1", *overrides]
    done = subprocess.run(argv, cwd=out.parent, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((out / "train_result.json").read_text())


def test_legacy_program_beside_every_checkpoint_when_pir_is_off(tmp_path):
    result = train(tmp_path / "o", "Global.export_with_pir=false", env={"FLAGS_json_format_model": "0"})
    out = tmp_path / "o"
    for folder in ("best_model", "latest", "epoch_1"):
        files = sorted(p.name for p in (out / folder / "inference").iterdir())
        assert files == ["inference.pdiparams", "inference.pdiparams.info", "inference.pdmodel", "inference.yml"]
        info = json.loads((out / folder / f"{folder}.info.json").read_text())
        assert info["epoch"] == 1 and info["metric"] == pytest.approx(result["history"][0]["top1"], abs=1e-6)
    best = result["models"]["best"]
    assert best["pdmodel"] == "best_model/inference/inference.pdmodel"
    assert all((out / path).is_file() for key, path in best.items() if key != "score")
    assert json.loads((out / "train_results.json").read_text()) == result
    assert not [p.name for p in out.iterdir() if p.name.startswith(".inference")]  # the scratch export is gone


def test_no_inference_folders_without_uniform_output(tmp_path):
    result = train(tmp_path / "o", "Train.uniform_output_enabled=False")
    out = tmp_path / "o"
    for folder in ("best_model", "latest", "epoch_1"):
        assert not (out / folder / "inference").exists()
        assert (out / folder / f"{folder}.info.json").is_file()
    assert set(result["models"]["last_1"]) == {"score", "pdparams", "pdopt", "pdstates"}


def test_only_the_newest_epoch_checkpoints_are_kept_and_listed(tmp_path):
    """Train.max_epoch_checkpoints=2 over 4 epochs: epoch_3 and epoch_4 remain, listed as last_1/last_2; the
    others were deleted (nothing half-deleted in the store) and train_result.json points at nothing missing."""
    out = tmp_path / "o"
    (out / "epoch_9").mkdir(parents=True)  # a later epoch of an earlier, longer run: not this run's to delete
    result = train(out, "Train.epochs_iters=4", "Train.max_epoch_checkpoints=2", "Train.uniform_output_enabled=False",
                   "Train.batch_size=64")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("epoch_")) == ["epoch_3", "epoch_4", "epoch_9"]
    models = result["models"]
    assert models["last_1"]["pdparams"] == "epoch_4/epoch_4.pdparams"
    assert models["last_2"]["pdparams"] == "epoch_3/epoch_3.pdparams"
    assert models["last_3"] == models["last_4"] == models["last_5"] == {}
    assert all((out / p).is_file() for m in models.values() for k, p in m.items() if k != "score")
    assert not [p for p in (out / ".checkpoints").iterdir() if p.name.startswith(".old-")]

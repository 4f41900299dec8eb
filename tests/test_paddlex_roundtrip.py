"""PaddleX round trip with the real `paddlex` package: PaddleX's shipped module config runs check_dataset ->
train -> evaluate -> export -> predict through tools/main.py, one tutorial command per mode, with only data,
device and size overrides (its relative paths as written: output, output/best_model/best_model.pdparams), and
paddlex.create_model on our best_model/inference agrees with our predict and with evaluate. Parametrised over
models."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import paddlex_ref
from paddledist.models.registry import REGISTRY

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "dataset" / "digits"
# a square model (ResNet18 takes the same resize-short + crop path; left out for CI time) and a non-square one
MODELS = {"PP-LCNet_x1_0": ["Train.input_size=32"],
          # non-square 80x160 inputs, resized without a crop, from PaddleX's textline_orientation module config
          "PP-LCNet_x0_25_textline_ori": []}

pytestmark = [pytest.mark.models, pytest.mark.multiproc]
ON_EVERY_PADDLE = "PP-LCNet_x1_0"
"""The model .ci/compat also runs on the oldest paddle (the other one adds input shapes, not paddle versions)."""


@pytest.fixture(scope="module", params=[pytest.param(name, marks=[pytest.mark.compat] if name == ON_EVERY_PADDLE
                                                     else []) for name in MODELS])
def run(request, tmp_path_factory):
    """PaddleX's config for the model, all five modes, in a fresh folder holding only that config and the data."""
    name = request.param
    shipped = paddlex_ref.module_config(name)
    assert name in REGISTRY, f"{name} is not in the model registry"
    cwd = tmp_path_factory.mktemp(name)
    (cwd / shipped.name).write_text(shipped.read_text())  # unchanged
    val = cwd / "val_images"
    val.mkdir()
    labels = {}
    for line in (DIGITS / "val.txt").read_text().splitlines():
        rel, label = line.split()
        (val / Path(rel).name).symlink_to(DIGITS / rel)
        labels[str(val / Path(rel).name)] = int(label)
    # PaddleX's tutorial commands, one mode each, plus data, device and size; the pretrained URL becomes
    # PaddleX's own spelling of null (no network here)
    common = [f"Global.dataset_dir={DIGITS}", "Global.device=cpu", "Train.num_classes=10",
              "Train.pretrain_weight_path=None", *MODELS[name]]
    steps = [
        ["Global.mode=check_dataset"],
        ["Global.mode=train", "Train.epochs_iters=2", "Train.batch_size=128", "Train.warmup_steps=0",
         "Train.learning_rate=0.05"],
        ["Global.mode=evaluate"],
        ["Global.mode=export", "Export.weight_path=./output/best_model/best_model.pdparams"],
        ["Global.mode=predict", "Predict.model_dir=./output/best_model/inference", f"Predict.input={val}",
         "Predict.batch_size=32"],
    ]
    for step in steps:
        argv = [sys.executable, str(REPO / "tools/main.py"), "-c", shipped.name,
                *[a for o in common + step for a in ("-o", o)]]
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1500,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert done.returncode == 0, (step, done.stdout[-3000:] + done.stderr[-3000:])
    return name, cwd / "output", labels


def test_paddlex_create_model_agrees_with_our_predict_and_evaluate(run):
    name, out, labels = run
    ours = {e["input"]: e for e in json.loads((out / "predict_result.json").read_text())}
    theirs = paddlex_ref.paddlex_predict(name, str(out / "best_model" / "inference"), sorted(labels))
    assert set(theirs) == set(labels) == set(ours)
    agree = sum(theirs[p]["class_ids"][0] == ours[p]["class_ids"][0] for p in labels) / len(labels)
    assert agree >= 0.99
    assert all(theirs[p]["label_names"][0] == ours[p]["label_names"][0] for p in labels)
    top1 = json.loads((out / "evaluate_result.json").read_text())["top1"]
    for result in (ours, theirs):
        accuracy = sum(result[p]["class_ids"][0] == labels[p] for p in labels) / len(labels)
        assert abs(accuracy - top1) <= 0.005


def test_train_result_read_as_paddlex_tooling_reads_it(run):
    name, out, labels = run
    for file in ("train_result.json", "train_results.json"):
        result = json.loads((out / file).read_text())
        assert result["model_name"] == name and result["done_flag"] is True
        assert (out / result["config"]).is_file() and (out / result["train_log"]).is_file()
        assert (out / result["label_dict"]).is_file()
        with_vdl = importlib.util.find_spec("visualdl") is not None  # the vdl extra: on by default once installed
        assert result["visualdl_log"] == ("vdl_log" if with_vdl else "")
        assert not with_vdl or any((out / "vdl_log").glob("vdlrecords.*.log"))
        assert [k for k in result["models"]] == ["last_1", "last_2", "last_3", "last_4", "last_5", "best"]
        best, last = result["models"]["best"], result["models"]["last_1"]
        assert last["pdparams"] == "epoch_2/epoch_2.pdparams" and result["models"]["last_2"]["pdparams"] == \
            "epoch_1/epoch_1.pdparams" and result["models"]["last_3"] == {}
        for entry in (best, last):
            for key in ("pdparams", "pdopt", "pdstates", "inference_config", "pdmodel", "pdiparams"):
                assert (out / entry[key]).is_file(), (key, entry[key])
        assert isinstance(best["score"], float)
    # the tooling's way: the best model's inference config, its folder handed to create_model
    model_dir = out / Path(result["models"]["best"]["inference_config"]).parent
    spec = yaml.safe_load((model_dir / "inference.yml").read_text())
    assert spec["Global"]["model_name"] == name
    one = sorted(labels)[:3]
    assert set(paddlex_ref.paddlex_predict(name, str(model_dir), one)) == set(one)


def test_every_checkpoint_folder_has_paddlex_files(run):
    _, out, _ = run
    for folder in ("best_model", "latest", "epoch_1", "epoch_2"):
        names = {p.name for p in (out / folder).iterdir()}
        assert {f"{folder}.pdparams", f"{folder}.pdopt", f"{folder}.pdstates", f"{folder}.info.json",
                "inference"} <= names, (folder, names)
        info = json.loads((out / folder / f"{folder}.info.json").read_text())
        assert {"epoch", "metric"} <= set(info)
        # the per-checkpoint export checked its own answers too (PaddleX loads it regardless: the first test)
        verified = yaml.safe_load((out / folder / "inference" / "inference.yml").read_text())["Verified"]
        assert verified["settings"] and all(e["passed"] for e in verified["settings"]), verified


# PaddleX's own training configs (paddlex/repo_apis/PaddleClas_api/configs/<name>.yaml, not in the wheel) feed
# these models with Infer.transforms ResizeImage size [W, H] and no CropImage; the square ones resize then crop.
PADDLEX_RESIZE = {"PP-LCNet_x0_25_textline_ori": [160, 80]}


def test_exported_preprocessing_has_the_models_shape(run):
    name, out, _ = run
    spec = yaml.safe_load((out / "best_model" / "inference" / "inference.yml").read_text())
    ops = spec["PreProcess"]["transform_ops"]
    names = [next(iter(op)) for op in ops]
    if name in PADDLEX_RESIZE:
        assert names == ["ResizeImage", "NormalizeImage", "ToCHWImage"]
        assert ops[0]["ResizeImage"]["size"] == PADDLEX_RESIZE[name]
    else:
        assert names == ["ResizeImage", "CropImage", "NormalizeImage", "ToCHWImage"]

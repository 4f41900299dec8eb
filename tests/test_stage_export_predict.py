"""export -> predict through the real tools: the exported program, run by paddle.inference on the validation
images, is exactly as accurate as evaluate; inference.yml drives preprocessing; a failed export changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from paddledist.config import load
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError
from paddledist.inference.preprocess import preprocess
from paddledist.stages import export, predict

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DIGITS = REPO / "dataset" / "digits"


def tool(script: str, *overrides: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(REPO / "tools" / script), "-c", CONFIG,
            "-o", f"Global.dataset_dir={DIGITS}", *overrides]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """train (2 epochs) -> evaluate -> export into one output folder, shared by this module."""
    out = tmp_path_factory.mktemp("exported")
    ok(tool("train.py", f"Global.output={out}", "Train.epochs_iters=2", cwd=out))
    ok(tool("eval.py", f"Global.output={out}", cwd=out))
    ok(tool("export.py", f"Global.output={out}", cwd=out))
    return out


@pytest.fixture(scope="module")
def val_images(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """A folder holding (links to) the validation images only, and each file name's label."""
    folder = tmp_path_factory.mktemp("val_images")
    labels = {}
    for line in (DIGITS / "val.txt").read_text().splitlines():
        rel, label = line.split()
        (folder / Path(rel).name).symlink_to(DIGITS / rel)
        labels[Path(rel).name] = int(label)
    return folder, labels


def test_export_writes_a_complete_inference_folder(exported):
    files = sorted(p.name for p in (exported / "inference").iterdir())
    assert files in (["inference.json", "inference.pdiparams", "inference.yml"],
                     ["inference.pdiparams", "inference.pdmodel", "inference.yml"])
    spec = yaml.safe_load((exported / "inference" / "inference.yml").read_text())
    assert spec["Global"]["model_name"] == "LeNet" and spec["Global"]["num_classes"] == 10
    ops = [next(iter(op)) for op in spec["PreProcess"]["transform_ops"]]
    assert ops == ["ResizeImage", "CropImage", "NormalizeImage", "ToCHWImage"]
    assert spec["PreProcess"]["transform_ops"][0]["ResizeImage"] == {"size": [32, 32], "backend": "pil",
                                                                     "interpolation": "BILINEAR"}
    assert spec["PostProcess"]["Topk"] == {"topk": 5, "label_list": [str(i) for i in range(10)]}
    assert not [p for p in exported.iterdir() if p.name.startswith(".inference")]
    # the export stage checked the program against the model (tests/test_export_verify.py has the details)
    assert [e["passed"] for e in spec["Verified"]["settings"]][:1] == [True]


def test_predict_on_the_validation_images_matches_evaluate(exported, val_images):
    folder, labels = val_images
    done = ok(tool("predict.py", f"Global.output={exported}", f"Predict.input={folder}", "Predict.batch_size=64",
                   cwd=exported))
    # PaddleX's default place: training wrote best_model/inference (Train.uniform_output_enabled)
    assert f"paddledist: predict: {len(labels)} image(s) with {exported}/best_model/inference (run_mode paddle)" \
        in done.stdout
    entries = json.loads((exported / "predict_result.json").read_text())
    assert len(entries) == len(labels)
    for e in entries:
        assert len(e["class_ids"]) == len(e["scores"]) == len(e["label_names"]) == 5
        assert e["scores"] == sorted(e["scores"], reverse=True) and 0 < sum(e["scores"]) <= 1.0 + 1e-5
    accuracy = np.mean([e["class_ids"][0] == labels[Path(e["input"]).name] for e in entries])
    evaluated = json.loads((exported / "evaluate_result.json").read_text())
    assert abs(accuracy - evaluated["top1"]) < 0.005


def test_one_file_with_onednn_and_a_bad_file_in_a_folder(exported, val_images, tmp_path):
    folder, labels = val_images
    image = sorted(folder.iterdir())[0]
    out = tmp_path / "o"
    ok(tool("predict.py", f"Global.output={out}", f"Predict.model_dir={exported}/inference", f"Predict.input={image}",
            "Predict.kernel_option.run_mode=mkldnn", cwd=tmp_path))
    [one] = json.loads((out / "predict_result.json").read_text())
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.png").symlink_to(image)
    (tmp_path / "mixed" / "b.png").write_bytes(b"no image here")
    done = tool("predict.py", f"Global.output={out}", f"Predict.model_dir={exported}/inference",
                f"Predict.input={tmp_path / 'mixed'}", cwd=tmp_path)
    assert done.returncode == 2 and "predict: 1 of 2 input(s) could not be read" in done.stderr
    good, bad = json.loads((out / "predict_result.json").read_text())
    assert good["class_ids"] == one["class_ids"] and "b.png" in bad["error"]


@pytest.mark.parametrize("overrides, message", [
    ((), "Predict.input is not set"),
    (("Predict.input=/no/such/image.png",), "Predict.input: no such file or folder: /no/such/image.png"),
    (("Predict.input=x.png", "Predict.kernel_option.run_mode=trt_fp16"), "unknown run mode 'trt_fp16'"),
    (("Predict.input=.", "Predict.model_dir=/no/model"), "Predict.model_dir: /no/model holds no exported model"),
])
def test_predict_user_errors_exit_2(tmp_path, overrides, message):
    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    done = tool("predict.py", f"Global.output={tmp_path / 'out'}", *overrides, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_export_without_weights_names_the_key_and_writes_nothing(tmp_path):
    done = tool("export.py", f"Global.output={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 2 and "Export.weight_path: file not found: " in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_failed_export_leaves_the_previous_model_untouched(exported, monkeypatch):
    cfg = load(CONFIG, [f"Global.output={exported}", f"Global.dataset_dir={DIGITS}"])
    before = {p.name: p.read_bytes() for p in (exported / "inference").iterdir()}

    def half_then_fail(model, size, prefix, pir=True):
        Path(prefix + ".pdiparams").write_bytes(b"half")
        raise UserError("simulated failure while saving")

    monkeypatch.setattr(export, "save_program", half_then_fail)
    with pytest.raises(UserError, match="simulated"):
        export.run(cfg, DistEnv())
    assert {p.name: p.read_bytes() for p in (exported / "inference").iterdir()} == before
    assert not [p for p in exported.iterdir() if p.name.startswith(".inference")]


@pytest.mark.parametrize("shape", [(8, 8, 3), (45, 61, 3), (32, 32, 3)])
def test_predict_preprocessing_equals_the_evaluation_transform(shape):
    from paddledist.data.pipeline import Transform, preprocess_spec

    image = np.random.RandomState(sum(shape)).randint(0, 256, shape).astype(np.uint8)
    assert np.array_equal(preprocess(image, preprocess_spec(32)), Transform(32, False, False)(image))


def test_top_k_is_capped_by_the_class_count():
    e = predict.top_k("a.png", np.array([0.1, 0.7, 0.2]), {"topk": 5, "label_list": ["x", "y", "z"]})
    assert e == {"input": "a.png", "class_ids": [1, 2, 0], "scores": [0.7, 0.2, 0.1], "label_names": ["y", "z", "x"]}


@pytest.mark.parametrize("size, side, resize_short", [("null", 224, 256), ("32", 32, 37)])
def test_export_follows_the_models_recipe(tmp_path, size, side, resize_short):
    """An ImageNet model exports at its recipe's size (Train.input_size, or its own 224 when null), and
    inference.yml holds the evaluation's resize-short-then-crop, which predict reproduces exactly."""
    import paddle

    from paddledist.data.pipeline import Transform
    from paddledist.models import build_model
    from paddledist.models.recipe import recipe

    paddle.seed(1)
    model = build_model("PP-LCNet_x0_25", 10, side)
    paddle.save(model.state_dict(), str(tmp_path / "w.pdparams"))
    cfg = load(CONFIG, [f"Global.output={tmp_path / 'out'}", f"Global.dataset_dir={DIGITS}",
                        "Global.model=PP-LCNet_x0_25", f"Train.input_size={size}",
                        f"Export.weight_path={tmp_path / 'w.pdparams'}"])
    export.run(cfg, DistEnv())
    spec = yaml.safe_load((tmp_path / "out" / "inference" / "inference.yml").read_text())
    assert spec["Global"]["input_size"] == side
    ops = spec["PreProcess"]["transform_ops"]
    assert ops[0]["ResizeImage"]["resize_short"] == resize_short and ops[1]["CropImage"]["size"] == side
    image = np.random.RandomState(side).randint(0, 256, (50, 70, 3)).astype(np.uint8)
    assert np.array_equal(preprocess(image, ops), Transform.of(recipe(cfg), False, False)(image))
    program = paddle.jit.load(str(tmp_path / "out" / "inference" / "inference"))
    x = paddle.to_tensor(Transform.of(recipe(cfg), False, False)(image)[None])
    model.eval()
    np.testing.assert_allclose(program(x).numpy(), paddle.nn.functional.softmax(model(x)).numpy(), atol=1e-5)


def test_predict_input_url_goes_to_the_hub_or_says_why_not(tmp_path, monkeypatch):
    import functools
    import http.server
    import threading

    image = tmp_path / "x.png"
    Image.new("RGB", (8, 8), (9, 99, 199)).save(image)
    assert predict.resolve_input(str(image)) == str(image)  # paths pass through untouched
    try:
        import paddledist.hub  # noqa: F401  (arrives with the weight-hub change)
    except ImportError:
        with pytest.raises(UserError, match="Predict.input: https://127.0.0.1:9/x.jpg is a URL, and this build"):
            predict.resolve_input("https://127.0.0.1:9/x.jpg")
        return
    # with the hub: a real server on 127.0.0.1, the image downloaded into PADDLEDIST_HOME
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path / "home"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        local = predict.resolve_input(f"http://127.0.0.1:{server.server_address[1]}/x.png")
    finally:
        server.shutdown()
    assert local.startswith(str(tmp_path / "home")) and Path(local).read_bytes() == image.read_bytes()
    assert predict.list_inputs(local) == [local]


def test_an_old_inference_yml_asks_for_a_new_export(exported, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for f in (exported / "inference").iterdir():
        (old / f.name).write_bytes(f.read_bytes())
    (old / "inference.yml").write_text(yaml.safe_dump({"PreProcess": {"resize": [32, 32]}, "PostProcess": {}}))
    with pytest.raises(UserError, match="is not a PaddleX image-classification inference.yml"):
        predict.read_model_dir(str(old))


@pytest.mark.parametrize("size, shape", [("null", (80, 160)), ("128", (64, 128))])
def test_text_line_models_take_non_square_inputs_everywhere(tmp_path, size, shape):
    """PP-LCNet_x0_25_textline_ori: 80 high x 160 wide (Train.input_size sets the width, the height follows), in
    training, evaluation, the exported program and inference.yml; a width below its stride is refused."""
    from paddledist.data.pipeline import Transform
    from paddledist.models.recipe import recipe

    base = [f"Global.output={tmp_path / 'out'}", f"Global.dataset_dir={DIGITS}", "Train.num_classes=2",
            "Global.model=PP-LCNet_x0_25_textline_ori"]
    rec = recipe(load(CONFIG, [*base, f"Train.input_size={size}"]))
    assert (rec.input_height, rec.input_size) == shape
    image = np.random.RandomState(3).randint(0, 256, (50, 70, 3)).astype(np.uint8)
    for train in (True, False):
        assert Transform.of(rec, train, True)(image).shape == (3, *shape)
    ops = export.inference_yml(load(CONFIG, [*base, f"Train.input_size={size}"]), "w")["PreProcess"]["transform_ops"]
    assert ops[0]["ResizeImage"]["size"] == [shape[1], shape[0]] and "CropImage" not in str(ops)
    assert np.array_equal(preprocess(image, ops), Transform.of(rec, False, False)(image))
    with pytest.raises(UserError, match="smallest input of 64 px"):
        recipe(load(CONFIG, [*base, "Train.input_size=32"]))

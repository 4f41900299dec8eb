"""Exports check their own answers (inference/verify.py): for every model family a small model is exported and its
program, run under every predictor setting this machine has (plain CPU; oneDNN where the build has it; GPU
where present), agrees with the dygraph model, as inference.yml's Verified section says; a setting that
disagrees is a failed entry and one stderr line, and predict never runs it."""

from __future__ import annotations

from pathlib import Path

import paddle
import pytest
import yaml

from paddledist import paddle_internals as internals
from paddledist.config import load
from paddledist.models import build_model
from paddledist.models.convnext import ChannelsFirstLayerNorm
from paddledist.models.recipe import recipe
from paddledist.models.registry import FAMILIES, REGISTRY
from paddledist.inference import verify
from paddledist.stages import export, predict

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DIGITS = REPO / "dataset" / "digits"

# family -> (its smallest model, Train.input_size: small where the family allows, null = the fixed design size)
SMALL = {
    "lenet": ("LeNet", "32"),
    "pp_lcnet": ("PP-LCNet_x0_25", "32"),
    "pp_lcnet_v2": ("PP-LCNetV2_small", "32"),
    "pp_hgnet": ("PP-HGNet_tiny", "32"),
    "pp_hgnet_v2": ("PP-HGNetV2-B0", "32"),
    "resnet": ("ResNet18", "32"),
    "mobilenet_v1": ("MobileNetV1_x0_25", "32"),
    "mobilenet_v2": ("MobileNetV2_x0_25", "32"),
    "mobilenet_v3": ("MobileNetV3_small_x0_35", "32"),
    "mobilenet_v4": ("MobileNetV4_conv_small", "32"),
    "convnext": ("ConvNeXt_tiny", "32"),
    "swin_transformer": ("SwinTransformer_tiny_patch4_window7_224", "null"),  # fixed 224 (windows)
    "vision_transformer": ("CLIP_vit_base_patch16_224", "null"),  # fixed 224 (position embeddings)
    "starnet": ("StarNet-S1", "32"),
    "fasternet": ("FasterNet-T0", "32"),
}


def config(tmp_path: Path, model: str, size: str):
    return load(CONFIG, [f"Global.model={model}", f"Train.input_size={size}", "Train.num_classes=10",
                         f"Global.dataset_dir={DIGITS}", f"Global.output={tmp_path / 'output'}"])


def export_to(tmp_path: Path, cfg, model) -> dict:
    """write_inference into tmp_path/inference (as export and the train hooks call it); inference.yml read back."""
    folder = tmp_path / "inference"
    export.write_inference(cfg, model, str(folder), "test weights")
    return yaml.safe_load((folder / "inference.yml").read_text())


@pytest.mark.models
@pytest.mark.compat
def test_every_family_has_a_small_model_here():
    assert set(SMALL) == set(FAMILIES)
    assert all(REGISTRY[name].family == family for family, (name, _) in SMALL.items())


@pytest.mark.models
@pytest.mark.compat
@pytest.mark.parametrize("family", list(SMALL))
def test_the_exported_program_agrees_with_the_model_under_every_setting_here(family, tmp_path, capfd):
    name, size = SMALL[family]
    cfg = config(tmp_path, name, size)
    paddle.seed(0)
    model = build_model(name, 10, recipe(cfg).input_size)
    spec = export_to(tmp_path, cfg, model)
    section = spec[verify.SECTION]
    here, not_run = verify.settings_here()
    assert [e["name"] for e in section["settings"]] == [s.name for s in here]
    if internals.has_onednn():  # ConvNeXt's oneDNN case among them (inference/verify.py, convnext.py)
        assert verify.ONEDNN in here
    for entry in section["settings"]:
        assert entry["passed"] is True and entry["max_abs_diff"] <= verify.TOLERANCE == entry["tolerance"], entry
    assert section["not_run"] == not_run and section["paddle_version"] == paddle.__version__
    assert "paddledist: export:" not in capfd.readouterr().err
    assert spec["Global"]["model_name"] == name  # the PaddleX sections are as before


class PaddleClasLayerNorm(ChannelsFirstLayerNorm):
    """PaddleClas's channels-first LayerNorm as written there, with .pow(2) (what convnext.py no longer does)."""

    def forward(self, x):
        centred = x - x.mean(1, keepdim=True)
        x = centred / paddle.sqrt(centred.pow(2).mean(1, keepdim=True) + self.epsilon)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class TinyNet(paddle.nn.Layer):
    """PaddleClas's LayerNorm on the input (plain layout, as after ConvNeXt's residual adds) -> conv -> mean pool
    -> head: the pattern paddle's oneDNN inplace_pass computes wrongly (paddle 3.0.0 and 3.3.1)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.conv, self.head = PaddleClasLayerNorm(3), paddle.nn.Conv2D(3, 8, 3, padding=1), \
            paddle.nn.Linear(8, 10)
        self.head.weight.set_value(self.head.weight * 20)  # decisive logits: a wrong value shows plainly

    def forward(self, x):
        return self.head(self.conv(self.norm(x)).mean([-2, -1]))


@pytest.mark.unit
def test_a_disagreeing_setting_is_a_failed_entry_and_one_line(tmp_path, monkeypatch, capfd):
    """A deliberately broken comparison: the oneDNN run's answers are moved by 0.01."""
    real = verify.run_program

    def broken(program, params, setting, batch):
        out = real(program, params, verify.PLAIN, batch)
        return out + 0.01 if setting == verify.ONEDNN else out

    monkeypatch.setattr(verify, "run_program", broken)
    monkeypatch.setattr(verify, "settings_here", lambda: ([verify.PLAIN, verify.ONEDNN], {"gpu/paddle": "none"}))
    cfg = config(tmp_path, "LeNet", "32")
    spec = export_to(tmp_path, cfg, build_model("LeNet", 10, 32))
    plain, onednn = spec[verify.SECTION]["settings"]
    assert plain["passed"] is True and plain["max_abs_diff"] == 0.0
    assert onednn["name"] == "cpu/mkldnn" and onednn["passed"] is False
    assert onednn["max_abs_diff"] == pytest.approx(0.01, rel=1e-3) and onednn["tolerance"] == verify.TOLERANCE
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("paddledist:")]
    assert len(lines) == 1 and "LeNet" in lines[0] and "cpu/mkldnn" in lines[0] and "0.01" in lines[0], lines
    # a training run's exporter (one `warned` for all its checkpoints) says it once; a new run says it again
    warned: set = set()
    for _ in range(2):
        export.write_inference(cfg, build_model("LeNet", 10, 32), str(tmp_path / "again"), "w", warned=warned)
    export.write_inference(cfg, build_model("LeNet", 10, 32), str(tmp_path / "again"), "w", warned=set())
    assert sum(line.startswith("paddledist: export:") for line in capfd.readouterr().err.splitlines()) == 2


@pytest.mark.unit
def test_a_setting_that_cannot_run_is_a_failed_entry_with_the_error(tmp_path):
    def fails(program, params, setting, batch):
        raise RuntimeError("no such device\nsecond line")

    net = build_model("LeNet", 10, 32)
    prefix = tmp_path / "inference"
    export.save_program(net, 32, str(prefix))
    section = verify.verify(net, f"{prefix}.json", f"{prefix}.pdiparams", 32, 32, settings=[verify.GPU],
                            skipped={}, runner=fails)
    (entry,) = section["settings"]
    assert entry == {"name": "gpu/paddle", "device": "gpu", "run_mode": "paddle", "max_abs_diff": None,
                     "passed": False, "error": "RuntimeError: no such device", "tolerance": verify.TOLERANCE}


@pytest.mark.unit
@pytest.mark.compat
def test_the_gpu_setting_runs_where_a_gpu_is_and_is_named_where_not(monkeypatch):
    here, not_run = verify.settings_here()
    assert (verify.GPU in here) == (paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0)
    assert (verify.GPU in here) != ("gpu/paddle" in not_run)
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: True)
    monkeypatch.setattr(paddle.device.cuda, "device_count", lambda: 1)
    assert verify.GPU in verify.settings_here()[0]
    monkeypatch.setattr(paddle.device.cuda, "device_count", lambda: 0)
    assert verify.settings_here()[1]["gpu/paddle"] == "no GPU here"


onednn_here = pytest.mark.skipif(not internals.has_onednn(), reason="this paddle build has no oneDNN")


@pytest.fixture
def real_disagreement(tmp_path, monkeypatch, capfd):  # capfd first: it sees the export's line
    """TinyNet exported as export does it: paddle's own oneDNN run disagrees (no injected fault)."""
    cfg = config(tmp_path, "LeNet", "32")
    paddle.seed(0)
    return cfg, export_to(tmp_path, cfg, TinyNet())


@pytest.mark.models
@pytest.mark.compat
@onednn_here
def test_paddles_onednn_inplace_bug_is_caught_by_the_check(real_disagreement, capfd):
    """Pins paddle's behaviour: when a paddle release fixes its inplace_pass this fails, and the docs' list of
    affected models and the comment in convnext.py can say which release fixed it."""
    _, spec = real_disagreement
    entries = {e["name"]: e for e in spec[verify.SECTION]["settings"]}
    assert entries["cpu/paddle"]["passed"] is True
    assert entries["cpu/mkldnn"]["passed"] is False and entries["cpu/mkldnn"]["max_abs_diff"] > 0.01
    assert "disagrees with the model under cpu/mkldnn" in capfd.readouterr().err


@pytest.mark.models
@onednn_here
def test_predict_does_not_run_a_setting_that_failed_at_export(real_disagreement, tmp_path, capfd):
    cfg, _ = real_disagreement
    images = tmp_path / "images"
    images.mkdir()
    for path in sorted((DIGITS / "images").iterdir())[:4]:
        (images / path.name).symlink_to(path)
    results = {}
    for run_mode in ("paddle", "mkldnn"):
        run_cfg = load(CONFIG, [f"Global.dataset_dir={DIGITS}", f"Global.output={tmp_path / run_mode}",
                                f"Predict.model_dir={tmp_path / 'inference'}", f"Predict.input={images}",
                                f"Predict.kernel_option.run_mode={run_mode}", "Predict.batch_size=8"])
        predict.run(run_cfg, None)
        results[run_mode] = yaml.safe_load((tmp_path / run_mode / predict.RESULT).read_text())
    out = capfd.readouterr().out
    refused = [line for line in out.splitlines() if "not using" in line]
    assert len(refused) == 1 and refused[0].startswith("paddledist: predict: not using cpu/mkldnn"), out
    assert results["mkldnn"] == results["paddle"] and len(results["paddle"]) == 4


@pytest.mark.unit
@pytest.mark.compat
def test_predict_keeps_a_setting_that_passed_or_was_never_checked(capsys):
    def spec(passed: bool) -> dict:
        return {verify.SECTION: {"paddle_version": "3.3.1", "settings": [
            {"name": "cpu/paddle", "device": "cpu", "run_mode": "paddle", "passed": True},
            {"name": "cpu/mkldnn", "device": "cpu", "run_mode": "mkldnn", "passed": passed,
             "max_abs_diff": 0.2, "tolerance": verify.TOLERANCE}]}}

    assert predict.verified_setting(spec(True), "mkldnn", "cpu") == ("mkldnn", "cpu")
    assert predict.verified_setting({}, "mkldnn", "cpu") == ("mkldnn", "cpu")  # an export before Verified
    assert predict.verified_setting(spec(False), "paddle", "cpu") == ("paddle", "cpu")
    assert capsys.readouterr().out == ""
    assert predict.verified_setting(spec(False), "mkldnn", "cpu") == ("paddle", "cpu")
    (line,) = capsys.readouterr().out.splitlines()
    assert "not using cpu/mkldnn" in line and "0.2" in line and "3.3.1" in line

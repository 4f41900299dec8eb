"""PP-LCNet, PP-LCNetV2, MobileNetV1 and MobileNetV3 are PaddleClas's networks: every registered name
against PaddleClas 2.6.0's own definition (tests/helpers/paddleclas_ref.py), built with the Arch arguments of
PaddleX's training config (class_num, stride_list, use_last_conv).

- every name: the same parameter and buffer names and shapes and per parameter the same learning-rate
  multiplier, regularizer and trainability, built lazily (paddle.LazyGuard);
- one variant per code path (PP-LCNet with/without last conv and with the text-line models' (2, 1) strides
  at their real 80x160; PP-LCNetV2's rep/split/shortcut blocks; MobileNetV1's int(c*scale) widths;
  MobileNetV3 large and small): the same eval outputs under identical random weights;
- one net per family trains a few steps and every weight the forward uses moves; train-mode outputs (same
  dropout seed) and batch-norm moving averages equal PaddleClas's.
"""

from __future__ import annotations

import logging

import numpy as np
import paddle
import pytest
import yaml

from paddledist.models import REGISTRY, build_model
from helpers.paddleclas_ref import (assert_same_function, assert_same_in_train_mode, assert_same_layout,
                                    parameter_attrs, ref_module, train_steps)
from helpers.paddlex_ref import model_names, module_config

pytestmark = pytest.mark.models

FAMILIES = ("pp_lcnet", "pp_lcnet_v2", "mobilenet_v1", "mobilenet_v3")
NAMES = [name for name, spec in REGISTRY.items() if spec.family in FAMILIES]
CLASSES = 10
ARCH_KWARGS = ("stride_list", "use_last_conv")
PREFIXES = ("PP-LCNet", "MobileNetV1", "MobileNetV3")  # every PaddleX name of these families


def reference(name: str, num_classes: int = CLASSES) -> paddle.nn.Layer:
    """PaddleClas's network for a registered name, with the Arch arguments PaddleX's config passes."""
    spec = REGISTRY[name]
    # PaddleClas's legacy BatchNorm logs a deprecation warning through ppcls's logger, set up by its engine.
    ref_module("ppcls.utils.logger").init_logger(log_level=logging.ERROR)
    module = ref_module(f"ppcls.arch.backbone.legendary_models.{spec.family}")
    if spec.family == "pp_lcnet":  # PaddleClas's PPLCNet writes stride_list into its module-level NET_CONFIG
        for stage in ("blocks3", "blocks4", "blocks5", "blocks6"):
            module.NET_CONFIG[stage][0][3] = 2
    arch = {k: [list(s) if isinstance(s, tuple) else s for s in v] if k == "stride_list" else v
            for k, v in spec.kwargs.items() if k in ARCH_KWARGS}
    return getattr(module, spec.paddleclas_name)(pretrained=False, class_num=num_classes, **arch)


def test_the_families_register_every_paddlex_name():
    widths = ("0_25", "0_35", "0_5", "0_75", "1_0", "1_5", "2_0", "2_5")
    expected = {f"PP-LCNet_x{w}" for w in widths} | {
        "PP-LCNet_x0_25_textline_ori", "PP-LCNet_x1_0_textline_ori", "PP-LCNet_x1_0_doc_ori",
        "PP-LCNet_x1_0_table_cls"} | {f"PP-LCNetV2_{s}" for s in ("small", "base", "large")}
    expected |= {f"MobileNetV1_x{w}" for w in ("0_25", "0_5", "0_75", "1_0")}
    expected |= {f"MobileNetV3_{s}_x{w}" for s in ("large", "small") for w in ("0_35", "0_5", "0_75", "1_0", "1_25")}
    assert set(NAMES) == expected


def test_every_paddlex_image_classification_name_of_the_families_is_registered():
    ours = [m for m in model_names() if m.startswith(PREFIXES)]
    assert len(ours) == len(NAMES) and set(ours) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_official_weights_and_class_count_are_paddlex_s(name):
    """`pretrain_weight_path: default` means the URL PaddleX's own module config for the model names."""
    train = yaml.safe_load(module_config(name).read_text())["Train"]
    assert REGISTRY[name].cfg.url == train["pretrain_weight_path"]
    if REGISTRY[name].cfg.num_classes != 1000:  # the special models' heads are PaddleX's class count
        assert REGISTRY[name].cfg.num_classes == train["num_classes"]


# The Arch sections of PaddleX's training configs (paddlex/repo_apis/PaddleClas_api/configs/<name>.yaml, not in the
# wheel): reference() builds PaddleClas's network from the spec's kwargs, so they are pinned here independently.
PADDLEX_ARCH = {
    "PP-LCNet_x0_25_textline_ori": {"stride_list": [2, [2, 1], [2, 1], [2, 1], [2, 1]]},
    "PP-LCNet_x1_0_textline_ori": {"stride_list": [2, [2, 1], [2, 1], [2, 1], [2, 1]]},
    "PP-LCNet_x1_0_doc_ori": {"use_last_conv": False},
}


def test_the_special_models_take_paddlex_s_arch_arguments():
    for name, arch in PADDLEX_ARCH.items():
        kwargs = REGISTRY[name].kwargs
        got = {k: [list(v) if isinstance(v, tuple) else v for v in kwargs[k]] if k == "stride_list" else kwargs[k]
               for k in arch}
        assert got == arch, name
    assert [n for n in NAMES if set(REGISTRY[n].kwargs) & set(ARCH_KWARGS)] == list(PADDLEX_ARCH)


@pytest.mark.parametrize("name", NAMES)
def test_names_shapes_and_parameter_attributes_equal_paddleclas(name):
    with paddle.LazyGuard():
        ours, theirs = build_model(name, CLASSES, 224), reference(name)
    assert_same_layout(ours, theirs)
    assert parameter_attrs(ours) == parameter_attrs(theirs)


SAME_FUNCTION = [
    ("PP-LCNet_x0_25", [2, 3, 32, 32]), ("PP-LCNet_x1_0_doc_ori", [2, 3, 40, 40]),
    ("PP-LCNet_x0_25_textline_ori", [2, 3, 80, 160]), ("PP-LCNetV2_small", [2, 3, 40, 40]),
    ("MobileNetV1_x0_75", [2, 3, 40, 40]), ("MobileNetV3_large_x0_35", [2, 3, 40, 40]),
    ("MobileNetV3_small_x0_5", [2, 3, 32, 32]),
]


@pytest.mark.parametrize("name, shape", SAME_FUNCTION, ids=[n for n, _ in SAME_FUNCTION])
def test_eval_outputs_equal_paddleclas(name, shape):
    assert min(shape[2:]) >= REGISTRY[name].cfg.min_input_size
    # hardswish halves the signal near 0 (PP-LCNet); MobileNetV1's 28 conv-bn-relu layers lose it slowly too
    gain = 2.0 if REGISTRY[name].family in ("pp_lcnet", "mobilenet_v1") else 1.0
    assert_same_function(build_model(name, CLASSES, shape[-1]), reference(name), shape, gain=gain)


@pytest.mark.parametrize("name", ["PP-LCNet_x0_25", "PP-LCNetV2_small", "MobileNetV1_x0_25",
                                  "MobileNetV3_small_x0_35"])
def test_a_few_training_steps_move_every_weight(name):
    paddle.seed(3)
    model = build_model(name, 4, 32)
    losses, frozen = train_steps(model, [4, 3, 32, 32])
    assert all(np.isfinite(losses)), losses
    assert [k for k in frozen if not is_inference_only(model, k)] == []


def is_inference_only(model: paddle.nn.Layer, name: str) -> bool:
    """PP-LCNetV2's use_rep blocks hold the fused `dw_conv` that only re_parameterize() fills for inference:
    training runs the branches in dw_conv_list (PaddleClas's network does the same)."""
    layer = model
    for part in name.split(".")[:-2]:
        layer = getattr(layer, part) if not part.isdigit() else layer[int(part)]
    return name.split(".")[-2] == "dw_conv" and getattr(layer, "use_rep", False)


@pytest.mark.parametrize("name", ["PP-LCNet_x0_25", "PP-LCNetV2_small", "MobileNetV1_x0_25",
                                  "MobileNetV3_small_x0_35"])
def test_train_mode_outputs_and_batch_norm_statistics_equal_paddleclas(name):
    assert_same_in_train_mode(build_model(name, CLASSES, 32), reference(name))

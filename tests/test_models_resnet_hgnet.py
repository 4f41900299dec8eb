"""ResNet (vb, vd), PP-HGNet and PP-HGNetV2 are PaddleClas's networks: every registered name against
PaddleClas 2.6.0's own definition (tests/helpers/paddleclas_ref.py).

- every name: the same parameter and buffer names and shapes, and per parameter the same learning-rate
  multiplier, regularizer and trainability (LAB scalars at 0.01x, batch norms of the HGNets without decay),
  built lazily (paddle.LazyGuard allocates nothing) so the 60-75M-parameter variants cost well under a second;
- one variant per distinct code path: the same eval outputs under identical random weights, at 32 px or at
  40 px where odd feature-map sides exercise the 'SAME'-padded pools and the vd shortcut's ceil-mode pool;
- one net per family: the same train-mode outputs and batch-norm moving averages (PaddleClas's ResNet uses
  the legacy BatchNorm layer);
- one net per family trains a few steps through build_model (train mode, finite loss, every weight moves).
"""

from __future__ import annotations

import logging

import numpy as np
import paddle
import pytest

from paddledist.models import REGISTRY, build_model
from helpers.paddleclas_ref import (assert_same_function, assert_same_in_train_mode, assert_same_layout,
                                    parameter_attrs, ref_module, train_steps)

pytestmark = pytest.mark.models

FAMILIES = ("resnet", "pp_hgnet", "pp_hgnet_v2")
NAMES = [name for name, spec in REGISTRY.items() if spec.family in FAMILIES]
CLASSES = 10


def reference(name: str, num_classes: int = CLASSES) -> paddle.nn.Layer:
    """PaddleClas's network for a registered name (Arch.name = spec.paddleclas_name), untrained."""
    # PaddleClas's ResNet logs a deprecation warning through ppcls's logger, which its engine would have set up.
    ref_module("ppcls.utils.logger").init_logger(log_level=logging.ERROR)
    module = ref_module(f"ppcls.arch.backbone.legendary_models.{REGISTRY[name].family}")
    return getattr(module, REGISTRY[name].paddleclas_name)(pretrained=False, class_num=num_classes)


def test_the_families_register_every_paddlex_name():
    expected = {f"ResNet{d}" for d in (18, 34, 50, 101, 152)} | {f"ResNet{d}_vd" for d in (18, 34, 50, 101, 152, 200)}
    expected |= {f"PP-HGNet_{s}" for s in ("tiny", "small", "base")} | {f"PP-HGNetV2-B{i}" for i in range(7)}
    assert set(NAMES) == expected


@pytest.mark.parametrize("name", NAMES)
def test_names_shapes_and_parameter_attributes_equal_paddleclas(name):
    with paddle.LazyGuard():  # shapes and attributes without allocating (or initialising) any weight
        ours, theirs = build_model(name, CLASSES, 224), reference(name)
    assert_same_layout(ours, theirs)
    assert parameter_attrs(ours) == parameter_attrs(theirs)


# One variant per code path: basic / bottleneck blocks, plain / vd stem and shortcut; HG blocks with 5 and 7
# layers and the base's 0.2 "downscale_in_infer" dropout; HGNetV2 with and without LearnableAffineBlocks.
SAME_FUNCTION = [
    ("ResNet18", 32), ("ResNet18_vd", 40), ("ResNet50", 32), ("ResNet50_vd", 40),
    ("PP-HGNet_tiny", 40), ("PP-HGNet_base", 32), ("PP-HGNetV2-B0", 40), ("PP-HGNetV2-B4", 32),
]


@pytest.mark.parametrize("name, side", SAME_FUNCTION, ids=[f"{n}-{s}px" for n, s in SAME_FUNCTION])
def test_eval_outputs_equal_paddleclas(name, side):
    assert side >= REGISTRY[name].cfg.min_input_size
    assert_same_function(build_model(name, CLASSES, side), reference(name), [2, 3, side, side])


def test_every_code_path_is_checked_for_outputs():
    """A new kind of variant (another block, stem or head switch) needs a row in SAME_FUNCTION: each
    registered spec's builder arguments that change the code path must appear there at least once."""
    def path(name):
        spec = REGISTRY[name]
        kwargs = dict(spec.kwargs)
        if spec.family == "resnet":
            return spec.family, kwargs["depth"] >= 50, kwargs["vd"]
        if spec.family == "pp_hgnet_v2":
            from paddledist.models.pp_hgnet_v2 import VARIANTS
            return spec.family, VARIANTS[kwargs["variant"]][1]
        from paddledist.models.pp_hgnet import VARIANTS
        return spec.family, VARIANTS[kwargs["size"]][2] > 0
    assert {path(n) for n in NAMES} == {path(n) for n, _ in SAME_FUNCTION}


@pytest.mark.parametrize("name", ["ResNet18_vd", "PP-HGNet_tiny", "PP-HGNetV2-B0"])
def test_a_few_training_steps_move_every_weight(name):
    paddle.seed(3)
    model = build_model(name, 4, 32)
    losses, frozen = train_steps(model, [4, 3, 32, 32])
    assert all(np.isfinite(losses)), losses
    assert [k for k in frozen if not feeds_only_a_batch_norm(k)] == []


def feeds_only_a_batch_norm(name: str) -> bool:
    """LAB scalars whose output reaches the loss only through conv -> train-mode batch norm (the block's
    squeeze before its excitation, the stem's 3x3 before its 1x1): batch statistics cancel a scalar affine of
    the conv's input, so their gradient is zero up to rounding, in PaddleClas's network as in ours."""
    return name.endswith(("aggregation_squeeze_conv.lab.scale", "aggregation_squeeze_conv.lab.bias",
                          "stem3.lab.scale", "stem3.lab.bias"))


@pytest.mark.parametrize("name", ["ResNet18_vd", "PP-HGNet_tiny", "PP-HGNetV2-B0"])
def test_train_mode_outputs_and_batch_norm_statistics_equal_paddleclas(name):
    """Training uses batch statistics and updates the running ones: PaddleClas's ResNet uses the legacy
    BatchNorm layer, ours BatchNorm2D, so the train-mode forward and its moving averages are checked too."""
    assert_same_in_train_mode(build_model(name, CLASSES, 32), reference(name))

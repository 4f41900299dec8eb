"""MobileNetV2, MobileNetV4, StarNet and FasterNet are PaddleClas's networks: every registered name against
PaddleClas 2.6.0's own definition (tests/helpers/paddleclas_ref.py; the four files are the same in PaddleClas's
develop branch, which PaddleX installs):

- MobileNetV2: ppcls/arch/backbone/model_zoo/mobilenet_v2.py
- MobileNetV4: ppcls/arch/backbone/legendary_models/mobilenet_v4.py
- StarNet: ppcls/arch/backbone/model_zoo/starnet.py
- FasterNet: ppcls/arch/backbone/model_zoo/fasternet.py

Every name: the same parameter and buffer names and shapes and per parameter the same learning-rate
multiplier, regularizer and trainability, built lazily (paddle.LazyGuard allocates nothing). One variant per
distinct code path: the same eval outputs under identical random weights. One net per family: the same
train-mode outputs and batch-norm moving averages (drop path off), and a few training steps through
build_model move every weight.
"""

from __future__ import annotations

import logging

import numpy as np
import paddle
import pytest

from paddledist.models import REGISTRY, build_model
from helpers.paddleclas_ref import assert_same_function, parameter_attrs, randomise, ref_module, train_steps

pytestmark = pytest.mark.models

REFERENCE_MODULES = {
    "mobilenet_v2": "ppcls.arch.backbone.model_zoo.mobilenet_v2",
    "mobilenet_v4": "ppcls.arch.backbone.legendary_models.mobilenet_v4",
    "starnet": "ppcls.arch.backbone.model_zoo.starnet",
    "fasternet": "ppcls.arch.backbone.model_zoo.fasternet",
}
NAMES = [name for name, spec in REGISTRY.items() if spec.family in REFERENCE_MODULES]
CLASSES = 10
# Builder arguments that PaddleX's Arch section passes on to PaddleClas's constructor too.
SHARED_KWARGS = ("drop_path_rate", "drop_rate")


def reference(name: str, num_classes: int = CLASSES, **overrides) -> paddle.nn.Layer:
    """PaddleClas's network for a registered name (Arch.name = spec.paddleclas_name, with PaddleX's Arch
    arguments), untrained."""
    spec = REGISTRY[name]
    kwargs = {k: v for k, v in spec.kwargs.items() if k in SHARED_KWARGS} | overrides
    # PaddleClas's TheseusLayer logs through ppcls's logger, which its engine would have set up.
    ref_module("ppcls.utils.logger").init_logger(log_level=logging.ERROR)
    module = ref_module(REFERENCE_MODULES[spec.family])
    # PaddleClas's MobileNetV2 names every parameter (ParamAttr(name=...)), and dygraph allows a name once
    # per name scope: each reference gets its own scope.
    with paddle.utils.unique_name.guard():
        return getattr(module, spec.paddleclas_name)(pretrained=False, class_num=num_classes, **kwargs)


def ours(name: str, side: int, num_classes: int = CLASSES, **overrides) -> paddle.nn.Layer:
    spec = REGISTRY[name]
    builder = getattr(__import__(f"paddledist.models.{spec.family}", fromlist=["_"]), spec.builder)
    return builder(num_classes=num_classes, input_size=side, **(dict(spec.kwargs) | overrides))


def test_the_families_register_every_paddlex_name():
    expected = {f"MobileNetV2_{w}" for w in ("x0_25", "x0_5", "x1_0", "x1_5", "x2_0")}
    expected |= {f"MobileNetV4_{v}" for v in ("conv_small", "conv_medium", "conv_large", "hybrid_medium",
                                                 "hybrid_large")}
    expected |= {f"StarNet-S{i}" for i in range(1, 5)}
    expected |= {f"FasterNet-{v}" for v in ("T0", "T1", "T2", "S", "M", "L")}
    assert set(NAMES) == expected


@pytest.mark.parametrize("name", NAMES)
def test_names_shapes_and_parameter_attributes_equal_paddleclas(name):
    with paddle.LazyGuard():  # shapes and attributes without allocating (or initialising) any weight
        mine, theirs = build_model(name, CLASSES, REGISTRY[name].cfg.input_size), reference(name)
    own = {k: list(v.shape) for k, v in mine.state_dict().items()}
    ref = {k: list(v.shape) for k, v in theirs.state_dict().items()}
    assert sorted(own.keys() - ref.keys()) == [] and sorted(ref.keys() - own.keys()) == []
    assert own == ref
    assert parameter_attrs(mine) == parameter_attrs(theirs)


def drop_path_rates(model: paddle.nn.Layer) -> list:
    return [round(float(getattr(layer, "p", getattr(layer, "drop_prob", None))), 6) for layer in model.sublayers()
            if type(layer).__name__ == "DropPath"]


@pytest.mark.parametrize("name", NAMES)
def test_stochastic_depth_rates_equal_paddleclas(name):
    """Drop path is random, so its outputs are not compared; its per-block rates (PaddleX's drop_path_rate
    or PaddleClas's own, spread over the blocks) are."""
    with paddle.LazyGuard():
        mine, theirs = build_model(name, CLASSES, REGISTRY[name].cfg.input_size), reference(name)
    assert drop_path_rates(mine) == drop_path_rates(theirs)


# One variant per code path. MobileNetV2: narrow (last conv stays 1280) and wide (last conv x scale); 40 px
# gives odd feature-map sides to the strided depthwise convs. MobileNetV4: cn + uir (conv_small), er + uir
# (conv_medium, conv_large), attention with spatially reduced keys and values and LayerScale (hybrid_medium
# at 64 px, so the reduction meets a 4x4 map) and the GELU net (hybrid_large; sides multiples of 32). StarNet: one
# code path (the variants differ in widths and depths only; stochastic depth is the identity in eval).
# FasterNet: GELU (T0, T1) and ReLU.
SAME_FUNCTION = [
    ("MobileNetV2_x0_25", 40), ("MobileNetV2_x1_5", 32),
    ("MobileNetV4_conv_small", 40), ("MobileNetV4_conv_medium", 40), ("MobileNetV4_hybrid_medium", 64),
    ("MobileNetV4_hybrid_large", 32),
    ("StarNet-S1", 40),
    ("FasterNet-T0", 40), ("FasterNet-T2", 32),
]


@pytest.mark.parametrize("name, side", SAME_FUNCTION, ids=[f"{n}-{s}px" for n, s in SAME_FUNCTION])
def test_eval_outputs_equal_paddleclas(name, side):
    assert side >= REGISTRY[name].cfg.min_input_size
    assert_same_function(build_model(name, CLASSES, side), reference(name), [2, 3, side, side], input_scale=8.0)


def test_mobilenet_v4_block_tables_equal_paddleclas():
    """Strides and kernel sizes that keep every shape (a stride moved inside a stage) would only show in
    outputs of the variants checked above: each table is compared with PaddleClas's NET_CONFIG row by row."""
    from paddledist.models.mobilenet_v4 import VARIANTS
    theirs = ref_module(REFERENCE_MODULES["mobilenet_v4"]).NET_CONFIG
    def row(r):  # PaddleClas's rows carry the activation and (mqa) a stride of 1; ours leave them out
        rest = [v for v in r[1:] if not isinstance(v, str)]
        return (r[0], *rest[:-1]) if r[0] == "mqa" else (r[0], *rest)
    for variant, (table, *_) in VARIANTS.items():
        assert [row(r) for r in theirs[variant]] == [tuple(r) for r in table], variant


def code_path(name: str) -> tuple:
    spec = REGISTRY[name]
    if spec.family == "mobilenet_v2":
        return spec.family, spec.kwargs["scale"] > 1.0
    if spec.family == "starnet":
        return (spec.family,)
    if spec.family == "mobilenet_v4":
        from paddledist.models.mobilenet_v4 import VARIANTS
        table, _, act, layer_scale = VARIANTS[spec.kwargs["variant"]]
        return spec.family, frozenset(row[0] for row in table), act, layer_scale > 0
    if spec.family == "fasternet":
        from paddledist.models.fasternet import VARIANTS
        return spec.family, VARIANTS[spec.kwargs["variant"]][3]
    raise AssertionError(f"no code-path rule for family {spec.family}")


def test_every_code_path_is_checked_for_outputs():
    """A new kind of variant needs a row in SAME_FUNCTION."""
    assert {code_path(n) for n in NAMES} == {code_path(n) for n, _ in SAME_FUNCTION}


TRAINED = [("MobileNetV2_x0_25", 32), ("MobileNetV4_conv_small", 32), ("MobileNetV4_hybrid_medium", 64),
           ("StarNet-S1", 32), ("FasterNet-T0", 32)]


@pytest.mark.parametrize("name, side", TRAINED)
def test_initial_weights_are_drawn_like_paddleclas(name, side):
    """Training from scratch starts where PaddleClas's does: per parameter the same initial distribution
    (mean, spread, range: FasterNet's truncated normal at 0.02, paddle's defaults elsewhere)."""
    paddle.seed(11)
    mine = ours(name, side)
    paddle.seed(12)
    theirs = dict(reference(name).named_parameters())
    for key, p in mine.named_parameters():
        a, b = p.numpy().ravel(), theirs[key].numpy().ravel()
        if a.size < 512:  # too few draws to compare spreads; constants still must match exactly
            if b.std() == 0:
                np.testing.assert_array_equal(a, b, err_msg=key)
            continue
        # bounds several standard errors wide: a wrong initialiser is off by far more (e.g. 0.02 vs He scale)
        assert abs(a.mean() - b.mean()) <= 6 * b.std() / np.sqrt(a.size) + 1e-7, (key, a.mean(), b.mean())
        assert abs(a.std() - b.std()) <= 0.1 * b.std() + 1e-7, (key, a.std(), b.std())
        qa, qb = np.quantile(np.abs(a), 0.95), np.quantile(np.abs(b), 0.95)
        assert abs(qa - qb) <= 0.1 * qb + 1e-7, (key, qa, qb)


@pytest.mark.parametrize("name, side", TRAINED)
def test_a_few_training_steps_move_every_weight(name, side):
    paddle.seed(3)
    model = build_model(name, 4, side)
    losses, frozen = train_steps(model, [4, 3, side, side])
    assert all(np.isfinite(losses)), losses
    assert frozen == []


@pytest.mark.parametrize("name, side", TRAINED)
def test_train_mode_outputs_and_batch_norm_statistics_equal_paddleclas(name, side):
    """Training uses batch statistics and updates the running ones (PaddleClas's MobileNetV2 and V4 use the
    legacy BatchNorm layer, ours BatchNorm2D; FasterNet's stem norm has its own momentum). Drop path is
    random, so it is switched off on both sides here."""
    no_drop = {k: 0.0 for k in SHARED_KWARGS if k in REGISTRY[name].kwargs}
    mine, theirs = ours(name, side, **no_drop), reference(name, **no_drop)
    state = randomise(theirs, seed=5)
    mine.set_state_dict(state)
    theirs.set_state_dict(state)
    mine.train()
    theirs.train()
    x = paddle.to_tensor(np.random.default_rng(6).standard_normal([4, 3, side, side]).astype("float32"))
    a, b = mine(x).numpy(), theirs(x).numpy()
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * max(1.0, float(np.abs(b).max())))
    theirs_after = theirs.state_dict()
    for key, value in mine.state_dict().items():
        if key.endswith(("_mean", "_variance")):
            assert not np.array_equal(value.numpy(), state[key]), f"{key} was not updated"
            np.testing.assert_allclose(value.numpy(), theirs_after[key].numpy(), rtol=1e-4, atol=1e-5, err_msg=key)

"""Swin Transformer against PaddleClas 2.6.0's definition (tests/helpers/paddleclas_ref.py,
ppcls.arch.backbone.legendary_models.swin_transformer).

- every name: the same parameter and buffer names and shapes and per-parameter attributes, built under
  paddle.LazyGuard (both build lazily, so even the large window-12 model costs well under a second), and the
  same relative-position index buffers (ours computed independently; the output checks load theirs);
- eval outputs, under identical random weights for two inputs whose outputs must differ: the tiny (window 7
  at 224 px: the last stage is one 7x7 window, still shifted and masked; and at 102 px, PaddleClas's
  zero-padding paths), and window 12 at 384 px on the tiny's widths (base/large at 384 cost 48 s);
- train mode with stochastic depth under one paddle.seed: the same outputs (the same draws in the same order);
- the tiny trains a few steps and every weight moves;
- the specs: fixed input side, and the weight URL PaddleX's own module config names.
"""

from __future__ import annotations


import numpy as np
import paddle
import pytest

from paddledist.models import REGISTRY, build_model
from paddledist.models.swin_transformer import swin_transformer
from helpers.paddleclas_ref import parameter_attrs, randomise, ref_module, train_steps
from helpers.paddlex_ref import model_names, module_config

pytestmark = pytest.mark.models

NAMES = [n for n, s in REGISTRY.items() if s.family == "swin_transformer"]
CLASSES = 10


def reference(name: str) -> paddle.nn.Layer:
    module = ref_module("ppcls.arch.backbone.legendary_models.swin_transformer")
    return getattr(module, REGISTRY[name].paddleclas_name)(pretrained=False, class_num=CLASSES)


def test_every_paddlex_swin_name_is_registered():
    expected = {"SwinTransformer_tiny_patch4_window7_224", "SwinTransformer_small_patch4_window7_224",
                "SwinTransformer_base_patch4_window7_224", "SwinTransformer_base_patch4_window12_384",
                "SwinTransformer_large_patch4_window7_224", "SwinTransformer_large_patch4_window12_384"}
    assert set(NAMES) == expected
    assert {m for m in model_names() if m.startswith("SwinTransformer_")} == expected


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_fixed_size_with_paddlex_weight_url(name):
    cfg = REGISTRY[name].cfg
    side = int(name.rsplit("_", 1)[1])
    assert (cfg.input_size, cfg.min_input_size, cfg.fixed_input_size) == (side, side, True)
    assert cfg.resize_short == {224: 256, 384: 438}[side] and cfg.interpolation == "bicubic"
    assert cfg.optimizer.name == "AdamW" and "relative_position_bias_table" in cfg.optimizer.no_weight_decay_name
    assert f"pretrain_weight_path: {cfg.url}" in module_config(name).read_text()


@pytest.mark.parametrize("name", NAMES)
def test_names_shapes_buffers_and_parameter_attributes_equal_paddleclas(name):
    side = REGISTRY[name].cfg.input_size
    with paddle.LazyGuard():  # no weight is allocated; buffers (the index tables) are real tensors
        ours, theirs = build_model(name, CLASSES, side), reference(name)
    own = {k: list(v.shape) for k, v in ours.state_dict().items()}
    ref = {k: list(v.shape) for k, v in theirs.state_dict().items()}
    assert sorted(own.keys() - ref.keys()) == [] and sorted(ref.keys() - own.keys()) == []
    assert own == ref
    assert parameter_attrs(ours) == parameter_attrs(theirs)
    theirs_buffers = dict(theirs.named_buffers())
    for key, buffer in ours.named_buffers():
        assert buffer.dtype == theirs_buffers[key].dtype, key
        np.testing.assert_array_equal(buffer.numpy(), theirs_buffers[key].numpy(), err_msg=key)


def lively(model, seed: int) -> dict:
    """paddleclas_ref.randomise, rescaled so the function depends visibly on its input: its 0.1-scaled
    draws shrink every residual branch until the mean-pooled logits are the head bias for any image.
    Matrices get unit-gain scale (std 1/sqrt(fan-in)), norm weights 1 +- 0.1, the bias tables std 1."""
    state = randomise(model, seed)
    for key, value in state.items():
        if value.dtype.kind != "f":
            continue
        if value.ndim >= 2 and not key.endswith("relative_position_bias_table"):
            fan_in = value.shape[0] if value.ndim == 2 else int(np.prod(value.shape[1:]))  # Linear: [in, out]
            state[key] = (value * (10.0 / np.sqrt(fan_in))).astype("float32")
        elif key.endswith("relative_position_bias_table"):
            state[key] = value * 10.0
        elif "norm" in key and key.endswith(".weight"):
            state[key] = value + 1.0
    return state


def _outputs(model, xs):
    with paddle.no_grad():
        return [model(x).numpy() for x in xs]


def assert_same_outputs(ours, theirs, side: int, extra_sides=()) -> None:
    """Identical lively weights; eval outputs equal for two inputs at `side` (which must differ from each
    other) and for one input at each of `extra_sides`."""
    state = lively(theirs, seed=0)
    ours.set_state_dict(state), theirs.set_state_dict(state)
    ours.eval(), theirs.eval()
    rng = np.random.default_rng(1)
    xs = [paddle.to_tensor(rng.standard_normal([1, 3, s, s]).astype("float32")) for s in (side, side, *extra_sides)]
    mine, ref = _outputs(ours, xs), _outputs(theirs, xs)
    tol = 1e-4 * max(1.0, float(np.abs(np.stack(ref)).max()))
    for a, b in zip(mine, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol)
    # Random weights too small would make every input give the same logits, and any two nets look equal.
    assert float(np.abs(ref[0] - ref[1]).max()) > 100 * tol


def test_eval_outputs_equal_paddleclas_window7_at_224_and_padded_at_102px():
    """Window 7 at its real 224 px; then 102 px, where PaddleClas zero-pads the patch grid (102 -> 104),
    every window partition (26 -> 28, 13 -> 14, 7 -> 7, 4 -> 7) and the odd-sided merges (13, 7)."""
    name = "SwinTransformer_tiny_patch4_window7_224"
    assert_same_outputs(build_model(name, CLASSES, 224), reference(name), 224, extra_sides=(102,))


def test_eval_outputs_equal_paddleclas_window12_at_384():
    """Window 12 (the 23x23 bias table, shift 6, the 96/48/24/12 grids at 384 px) on the tiny's widths:
    PaddleClas's SwinTransformer class with the same arguments our builder takes. The registered window-12
    models (base, large) took 48 s for this check on the shared CPU; their shapes are checked above."""
    module = ref_module("ppcls.arch.backbone.legendary_models.swin_transformer")
    theirs = module.SwinTransformer(img_size=384, class_num=CLASSES, embed_dim=96, depths=[2, 2, 6, 2],
                                    num_heads=[3, 6, 12, 24], window_size=12, drop_path_rate=0.2)
    ours = swin_transformer(CLASSES, 384, size="tiny", window_size=12)
    assert_same_outputs(ours, theirs, 384)


def test_train_mode_drop_path_equals_paddleclas_under_one_seed():
    name = "SwinTransformer_tiny_patch4_window7_224"
    ours, theirs = build_model(name, CLASSES, 224), reference(name)
    state = lively(theirs, seed=2)
    ours.set_state_dict(state), theirs.set_state_dict(state)
    ours.train(), theirs.train()
    x = paddle.to_tensor(np.random.default_rng(3).standard_normal([2, 3, 224, 224]).astype("float32"))
    paddle.seed(7)
    a = ours(x).numpy()
    paddle.seed(7)
    b = theirs(x).numpy()
    paddle.seed(8)
    c = theirs(x).numpy()
    tol = 1e-4 * max(1.0, float(np.abs(b).max()))
    np.testing.assert_allclose(a, b, rtol=0, atol=tol)
    assert float(np.abs(b - c).max()) > 100 * tol, "drop path did not change the train-mode output"


def test_a_few_training_steps_move_every_weight():
    paddle.seed(3)
    model = build_model("SwinTransformer_tiny_patch4_window7_224", 4, 224)
    losses, frozen = train_steps(model, [2, 3, 224, 224], steps=2, adamw=True)
    assert all(np.isfinite(losses)), losses
    assert frozen == []

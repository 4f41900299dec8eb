"""ConvNeXt against PaddleClas 2.6.0's definition (tests/helpers/paddleclas_ref.py): names and shapes of every variant
(tiny and small also parameter attributes), eval outputs of ConvNeXt_tiny, drop path's train-mode semantics
under one seed, and a few AdamW steps that move every weight."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from paddledist.models import REGISTRY, build_model
from helpers.paddleclas_ref import assert_same_function, parameter_attrs, ref_module, train_steps

pytestmark = pytest.mark.models
NAMES = [n for n, s in REGISTRY.items() if s.family == "convnext"]


def reference(name: str, **kwargs) -> paddle.nn.Layer:
    module = ref_module("ppcls.arch.backbone.model_zoo.convnext")
    return getattr(module, REGISTRY[name].paddleclas_name)(class_num=10, drop_path_rate=0.1, **kwargs)


def test_every_paddlex_convnext_name_is_registered():
    assert set(NAMES) == {"ConvNeXt_tiny", "ConvNeXt_small", "ConvNeXt_base_224", "ConvNeXt_base_384",
                          "ConvNeXt_large_224", "ConvNeXt_large_384"}


# PaddleClas's ConvNeXt calls set_value on its head, which paddle.LazyGuard cannot do: built eagerly, so
# only the two smaller variants here (base and large share small's code path with wider dims).
@pytest.mark.parametrize("name", ["ConvNeXt_tiny", "ConvNeXt_small"])
def test_names_and_shapes_equal_paddleclas(name):
    ours, theirs = build_model(name, 10, 224), reference(name)
    assert {k: list(v.shape) for k, v in ours.state_dict().items()} == \
        {k: list(v.shape) for k, v in theirs.state_dict().items()}
    assert parameter_attrs(ours) == parameter_attrs(theirs)  # lr multipliers, own regularizers, trainability


def test_eval_outputs_equal_paddleclas():
    assert_same_function(build_model("ConvNeXt_tiny", 10, 64), reference("ConvNeXt_tiny"), [2, 3, 64, 64])


def test_train_mode_drop_path_equals_paddleclas_under_one_seed():
    ours, theirs = build_model("ConvNeXt_tiny", 10, 64), reference("ConvNeXt_tiny")
    ours.set_state_dict(theirs.state_dict())
    ours.train(), theirs.train()
    x = paddle.to_tensor(np.random.default_rng(1).standard_normal([4, 3, 64, 64]).astype("float32"))
    paddle.seed(7)
    a = ours(x).numpy()
    paddle.seed(7)
    b = theirs(x).numpy()
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("name", ["ConvNeXt_base_224", "ConvNeXt_base_384", "ConvNeXt_large_224", "ConvNeXt_large_384"])
def test_wider_variants_names_and_shapes_equal_paddleclas(name):
    """base and large: ours lazily, PaddleClas's eagerly (its head's set_value needs real tensors)."""
    with paddle.LazyGuard():
        ours = build_model(name, 10, REGISTRY[name].cfg.input_size)
    theirs = reference(name)
    assert {k: list(v.shape) for k, v in ours.state_dict().items()} == \
        {k: list(v.shape) for k, v in theirs.state_dict().items()}


def test_a_few_training_steps_move_every_weight():
    paddle.seed(3)
    model = build_model("ConvNeXt_tiny", 4, 32)
    losses, frozen = train_steps(model, [4, 3, 32, 32], adamw=True)
    assert all(np.isfinite(losses)), losses
    assert frozen == []

"""build_optimizer follows the model's recipe: checked by what one real optimizer step does to each parameter.

With every gradient zero, one step changes a parameter only through weight decay: Momentum's L2 and AdamW's
decoupled decay both scale it by (1 - lr * coeff), and a parameter AdamW must not decay stays as it was.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import paddle
import pytest

from paddledist.config import Config
from paddledist.engine.distenv import DistEnv
from paddledist.models import build_model
from paddledist.models.recipe import recipe
from paddledist.stages.train import build_optimizer

pytestmark = pytest.mark.unit
LR, DECAY = 0.5, 0.1


def config(model: str, **train) -> Config:
    base = Config()
    return dataclasses.replace(base, Global=dataclasses.replace(base.Global, model=model),
                               Train=dataclasses.replace(base.Train, **{"num_classes": 10, "learning_rate": LR,
                                                                        "warmup_steps": 0, **train}))


def step_with_zero_grads(cfg: Config):
    paddle.seed(0)
    model = build_model(cfg.Global.model, cfg.Train.num_classes, 32)
    optimizer, scheduler = build_optimizer(cfg, DistEnv(), model, steps_per_epoch=2)
    trained = [(n, p) for n, p in model.named_parameters() if not p.stop_gradient]  # not batch-norm statistics
    before = {n: p.numpy().copy() for n, p in trained}
    sum((p * 0).sum() for _, p in trained).backward()
    optimizer.step()
    after = {n: p.numpy() for n, p in trained}
    return optimizer, scheduler, before, after


def decayed(before: dict, after: dict) -> dict:
    """name -> True (scaled by 1 - LR * DECAY), False (unchanged); anything else fails."""
    out = {}
    for name, b in before.items():
        if np.allclose(after[name], b, rtol=0, atol=1e-7):
            out[name] = False
        else:
            np.testing.assert_allclose(after[name], b * (1 - LR * DECAY), rtol=1e-5, atol=1e-7, err_msg=name)
            out[name] = True
    return {n: v for n, v in out.items() if np.abs(before[n]).max() > 0}  # all-zero tensors say nothing


def test_convnext_adamw_leaves_one_dim_parameters_undecayed():
    cfg = config("ConvNeXt_tiny", weight_decay=DECAY)
    assert recipe(cfg).optimizer == "AdamW"
    optimizer, _, before, after = step_with_zero_grads(cfg)
    assert type(optimizer) is paddle.optimizer.AdamW
    shapes = {n: v.ndim for n, v in before.items()}
    got = decayed(before, after)
    assert got and all(got[n] == (shapes[n] > 1) for n in got), [n for n in got if got[n] != (shapes[n] > 1)]
    assert any(not v for v in got.values()) and any(got.values())


def test_resnet_momentum_decays_every_parameter_with_l2():
    cfg = config("ResNet18", weight_decay=DECAY)
    assert recipe(cfg).optimizer == "Momentum"
    optimizer, scheduler, before, after = step_with_zero_grads(cfg)
    assert type(optimizer) is paddle.optimizer.Momentum
    got = decayed(before, after)
    assert got and all(got.values())


def test_choosing_adamw_for_a_momentum_model_decays_everything():
    # The model's own no-decay sets belong to its own optimizer only (ResNet has none anyway).
    optimizer, _, before, after = step_with_zero_grads(config("ResNet18", optimizer="AdamW", weight_decay=DECAY))
    assert type(optimizer) is paddle.optimizer.AdamW
    assert all(decayed(before, after).values())


def test_piecewise_schedule_with_warmup():
    # ResNet18 trains with PaddleClas's Piecewise (x0.1 at epochs 30, 60, 90); 2 updates per epoch here.
    cfg = config("ResNet18", warmup_steps=1, epochs_iters=100)
    model = build_model("ResNet18", 10, 32)
    _, scheduler = build_optimizer(cfg, DistEnv(), model, steps_per_epoch=2)
    lrs = []
    for _ in range(200):
        lrs.append(scheduler.get_lr())
        scheduler.step()
    assert lrs[0] == pytest.approx(LR / 2) and lrs[1] == pytest.approx(LR)
    assert lrs[59] == pytest.approx(LR) and lrs[60] == pytest.approx(LR * 0.1)
    assert lrs[120] == pytest.approx(LR * 0.01) and lrs[199] == pytest.approx(LR * 0.001)


def test_cosine_schedule_can_be_chosen():
    cfg = config("ResNet18", lr_scheduler="cosine", epochs_iters=10)
    _, scheduler = build_optimizer(cfg, DistEnv(), build_model("LeNet", 10, 32), steps_per_epoch=2)
    lrs = []
    for _ in range(20):
        lrs.append(scheduler.get_lr())
        scheduler.step()
    assert lrs[0] == pytest.approx(LR) and lrs[10] == pytest.approx(LR / 2) and lrs[19] < LR * 0.01


def test_clip_grad_norm_bounds_the_update():
    # Momentum without decay: the first update is lr * clipped gradient, whose global norm is the clip value.
    cfg = config("LeNet", clip_grad_norm=0.25, weight_decay=0.0)
    model = build_model("LeNet", 10, 32)
    optimizer, _ = build_optimizer(cfg, DistEnv(), model, steps_per_epoch=2)
    trained = [p for p in model.parameters() if not p.stop_gradient]
    before = [p.numpy().copy() for p in trained]
    sum((p * 100.0).sum() for p in trained).backward()
    optimizer.step()
    delta = np.sqrt(sum(((p.numpy() - b) ** 2).sum() for p, b in zip(trained, before)))
    assert delta == pytest.approx(LR * 0.25, rel=1e-4)


def test_clip_adamwdl_decays_layer_by_layer_and_exempts_norms_and_embeddings():
    """PaddleX trains CLIP with AdamWDL: lr x 0.6**(L - i) in blocks.i, x 0.6**(L + 1) for names holding "embed",
    and (filter_bias_and_bn) no decay for 1-D parameters and the model's no_weight_decay() names. With zero
    gradients a step is the decoupled decay alone, param x (1 - lr x ratio x decay), so it shows both."""
    from paddledist.models.vision_transformer import clip_vit

    cfg = config("CLIP_vit_base_patch16_224", weight_decay=DECAY)
    rec = recipe(cfg)
    assert (rec.optimizer, rec.layerwise_decay, rec.filter_bias_and_bn) == ("AdamWDL", 0.6, True)
    paddle.seed(0)
    model = clip_vit(num_classes=10, depth=2)
    optimizer, _ = build_optimizer(cfg, DistEnv(), model, steps_per_epoch=2)
    assert isinstance(optimizer, paddle.optimizer.AdamW)
    before = {n: p.numpy().copy() for n, p in model.named_parameters()}
    sum((p * 0).sum() for p in model.parameters()).backward()
    optimizer.step()
    for name, p in model.named_parameters():
        ratio = (0.6 ** (2 - int(name.split(".")[1])) if name.startswith("blocks.") else
                 0.6 ** 3 if "embed" in name else 1.0)
        exempt = p.ndim == 1 or name in ("pos_embed", "cls_token")
        expected = before[name] if exempt else before[name] * (1 - LR * ratio * DECAY)
        np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-7, err_msg=name)
    assert model.pos_embed.optimize_attr["learning_rate"] == pytest.approx(0.6 ** 3)
    assert model.blocks[0].attn.qkv.weight.optimize_attr["learning_rate"] == pytest.approx(0.6 ** 2)

"""The optimizer and LR schedule a model's recipe (paddledist.models.recipe) asks for, as PaddleClas builds them.

Momentum: one L2 regulariser on every parameter (PaddleClas's `regularizer: L2, coeff`). AdamW: decoupled
weight decay, except for parameters whose structured name contains one of `no_weight_decay_name` or, with
`one_dim_param_no_weight_decay`, that are 1-D (norm scales, biases). Paddle's `apply_decay_param_fun` is asked
with the parameter's *unique* name (`linear_3.w_0`), so the structured names are mapped to those first, as
PaddleClas does. AdamWDL (PaddleX's CLIP recipe): AdamW with PaddleClas's layer-wise lr decay set once on each
parameter's lr multiplier, and filter_bias_and_bn's exemptions. `clip_grad_norm` > 0 adds
paddle.nn.ClipGradByGlobalNorm. The schedule is a per-update factor: linear warm-up, then cosine to 0 or piecewise
x0.1 at each decay epoch.
"""

from __future__ import annotations

import paddle

from paddledist.engine.schedule import lr_factor, piecewise_factor


def no_decay_names(model, no_weight_decay_name: tuple, one_dim: bool) -> set:
    """Unique names (param.name) of the parameters AdamW must not decay."""
    skip = set()
    for name, p in model.named_parameters():
        if (one_dim and len(p.shape) == 1) or any(part in name for part in no_weight_decay_name):
            skip.add(p.name)
    return skip


def schedule(rec, base_lr: float, total: int, warmup: int, updates_per_epoch: int):
    """The LR scheduler: a LambdaDecay over optimizer updates (one step() per update)."""
    if rec.schedule == "piecewise":
        bounds = [e * updates_per_epoch for e in rec.decay_epochs]
        return paddle.optimizer.lr.LambdaDecay(base_lr, lambda step: piecewise_factor(step, warmup, bounds))
    return paddle.optimizer.lr.LambdaDecay(base_lr, lambda step: lr_factor(step, total, warmup))


def layerwise_ratio(name: str, decay: float, num_layers: int) -> float:
    """PaddleClas's AdamWDL layer-wise lr decay: `blocks.<i>.` x decay**(L - i); else "embed" x decay**(L + 1)."""
    if "blocks." in name:
        return decay ** (num_layers - int(name[name.find("blocks."):].split(".")[1]))
    return decay ** (num_layers + 1) if "embed" in name else 1.0


def apply_layerwise_decay(model, decay: float) -> None:
    """Scale each parameter's own lr multiplier once (what AdamWDL does per step, done up front)."""
    num_layers = model.get_num_layers()
    for name, p in model.named_parameters():
        p.optimize_attr["learning_rate"] *= layerwise_ratio(name, decay, num_layers)


def make_optimizer(rec, model, scheduler, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8):
    clip = paddle.nn.ClipGradByGlobalNorm(rec.clip_grad_norm) if rec.clip_grad_norm else None
    if rec.optimizer in ("AdamW", "AdamWDL"):
        skip = no_decay_names(model, rec.no_weight_decay_name, rec.one_dim_param_no_weight_decay)
        if rec.optimizer == "AdamWDL":
            if rec.layerwise_decay:
                apply_layerwise_decay(model, rec.layerwise_decay)
            if rec.filter_bias_and_bn:
                exempt = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
                skip |= {p.name for n, p in model.named_parameters() if len(p.shape) == 1 or n in exempt}
        return paddle.optimizer.AdamW(learning_rate=scheduler, beta1=beta1, beta2=beta2, epsilon=epsilon,
                                      parameters=model.parameters(), weight_decay=rec.weight_decay,
                                      apply_decay_param_fun=lambda name: name not in skip, grad_clip=clip)
    return paddle.optimizer.Momentum(learning_rate=scheduler, momentum=rec.momentum, parameters=model.parameters(),
                                     weight_decay=paddle.regularizer.L2Decay(rec.weight_decay), grad_clip=clip)

"""paddle's Momentum update outside optimizer.step(): the shm sync's shared step (engine/sync/shared_step.py)
calls the optimizer's own kernel with its settings. Part of the private-API wall (its probe is in __init__)."""

from __future__ import annotations

from typing import Optional

import paddle
from paddle import _C_ops


def momentum_kind(optimizer) -> bool:
    """Plain fp32 Momentum without gradient clipping, multi-tensor, parameter groups or a regularizer that the
    kernel does not apply: the update `momentum_update` reproduces for every parameter."""
    return (type(optimizer) is paddle.optimizer.Momentum and optimizer._grad_clip is None
            and not optimizer._multi_precision and not optimizer._use_multi_tensor
            and getattr(optimizer, "regularization", None) is None
            and not isinstance(optimizer._parameter_list[0], dict)
            and all(momentum_terms(optimizer, p) is not None for p in optimizer._parameter_list))


def momentum_terms(optimizer, param) -> Optional[tuple[str, float, float]]:
    """(regularization method, coefficient, learning-rate multiplier) of `param` as Momentum's own
    _append_optimize_op decides them; None where paddle would do more than the kernel (another regularizer
    applied to the gradient first, a tensor learning rate, a non-fp32 parameter)."""
    lr_mult = param.optimize_attr.get("learning_rate", 1.0) if hasattr(param, "optimize_attr") else 1.0
    if param.dtype != paddle.float32 or not isinstance(lr_mult, (int, float)):
        return None
    reg = getattr(param, "regularizer", None)
    if reg is None:
        return optimizer._regularization_method, optimizer._regularization_coeff, float(lr_mult)
    if isinstance(reg, paddle.regularizer.L2Decay):
        return "l2_decay", reg._coeff, float(lr_mult)
    return None


def momentum_velocities(optimizer, params) -> list:
    """The optimizer's velocity tensors of `params`, created now if no step has made them yet."""
    optimizer._create_accumulators(paddle.static.default_main_program().global_block(), params)
    return [optimizer._get_accumulator_master(optimizer._velocity_acc_str, p) for p in params]


def momentum_update(optimizer, param, grad, velocity, lr, terms: tuple[str, float, float]) -> None:
    """paddle's own Momentum kernel on (param, velocity) in place, with the optimizer's settings: bit for bit
    what optimizer.step() does to that parameter. `lr` is a [1] tensor (already times the multiplier)."""
    method, coeff, _ = terms
    _C_ops.momentum_(param, grad, velocity, lr, None, optimizer._momentum, optimizer._use_nesterov, method, coeff,
                     False, optimizer._rescale_grad)

"""Building blocks the model families share (as timm keeps `layers/`): the activation table, conv + batch norm
(+ activation), squeeze-and-excitation, stochastic depth and its per-block rates, and batch norm exempt from
weight decay. Their parameters are named as PaddleClas names them in every family that uses them (`conv`, `bn`,
`act` for PReLU's slope; `conv1`, `conv2`), so moving them here changed no parameter name (the PaddleClas
name/shape/output tests prove it). MobileNetV2 keeps its own conv-BN: PaddleClas names those `_conv` and
`_batch_norm`.

Stochastic depth (Huang et al., 2016), as PaddleClas's networks apply it: in training, each sample's branch
is zeroed with probability p and the kept ones are scaled by 1/(1-p); in eval it is the identity."""

from __future__ import annotations

from typing import Callable, Optional

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

ACTIVATIONS: dict[str, Callable[[], nn.Layer]] = {
    "relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish, "gelu": nn.GELU, "sigmoid": nn.Sigmoid,
    "prelu": nn.PReLU, "leaky_relu": lambda: nn.LeakyReLU(negative_slope=0.1)}
"""Activation name (as PaddleClas's configs spell them) -> a fresh layer; PReLU holds a parameter."""


def activation(name: Optional[str]) -> Optional[nn.Layer]:
    """A fresh activation layer, or None for a linear output."""
    return None if name is None else ACTIVATIONS[name]()


class DropPath(nn.Layer):
    """Per-sample branch dropout; parameter-free, so it never appears in a state_dict."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        # floor(keep + U[0,1)) is 1 with probability `keep`: one draw per sample, broadcast over the rest.
        mask = paddle.floor(keep + paddle.rand([x.shape[0]] + [1] * (x.ndim - 1)).astype(x.dtype))
        return x / keep * mask


def drop_path_rates(rate: float, blocks: int) -> list[float]:
    """Linearly rising rates from 0 to `rate` over `blocks` blocks (PaddleClas's paddle.linspace schedule)."""
    if blocks == 1:
        return [0.0]
    return [rate * i / (blocks - 1) for i in range(blocks)]


def no_decay(lr_mult: float = 1.0) -> paddle.ParamAttr:
    """Batch-norm parameters: exempt from an optimizer-wide L2 regularizer (PaddleClas's L2Decay(0.0)),
    learning at `lr_mult` times the rate."""
    return paddle.ParamAttr(regularizer=paddle.regularizer.L2Decay(0.0), learning_rate=lr_mult)


def batch_norm(channels: int, lr_mult: float = 1.0) -> nn.BatchNorm2D:
    """BatchNorm2D whose scale and shift carry no weight decay, as PaddleClas builds them."""
    return nn.BatchNorm2D(channels, weight_attr=no_decay(lr_mult), bias_attr=no_decay(lr_mult))


def _conv_attr(kaiming: bool, lr_mult: float) -> Optional[paddle.ParamAttr]:
    if not kaiming and lr_mult == 1.0:
        return None  # paddle's default initializer
    return paddle.ParamAttr(initializer=nn.initializer.KaimingNormal() if kaiming else None, learning_rate=lr_mult)


class ConvBNAct(nn.Layer):
    """Conv ('same' padding for odd kernels unless `padding` says otherwise; no bias unless `bias`), batch
    norm (unless not `bn`), then the activation `act` names (None: linear). `kaiming`: KaimingNormal conv
    weights; `lr_mult`: the conv's and batch norm's learning-rate multiplier; `decay_bn`: a plain BatchNorm2D
    (the optimizer's weight decay applies) instead of `batch_norm`'s L2Decay(0)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: Optional[str] = None,
                 *, padding=None, kaiming: bool = False, lr_mult: float = 1.0, decay_bn: bool = False,
                 bias: bool = False, bn: bool = True) -> None:
        super().__init__()
        padding = (k - 1) // 2 if padding is None else padding
        self.conv = nn.Conv2D(c_in, c_out, k, stride, padding=padding, groups=groups,
                              weight_attr=_conv_attr(kaiming, lr_mult), bias_attr=None if bias else False)
        self.bn = None
        if bn:
            self.bn = nn.BatchNorm2D(c_out) if decay_bn else batch_norm(c_out, lr_mult)
        self.act = activation(act)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.conv(x)
        x = x if self.bn is None else self.bn(x)
        return x if self.act is None else self.act(x)


class HardSigmoid(nn.Layer):
    """clip(slope * x + offset, 0, 1): nn.Hardsigmoid with the slope as a parameter (MobileNetV3's SE: 0.2)."""

    def __init__(self, slope: float = 0.1666667, offset: float = 0.5) -> None:
        super().__init__()
        self.slope, self.offset = slope, offset

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return F.hardsigmoid(x, slope=self.slope, offset=self.offset)


class SqueezeExcite(nn.Layer):
    """x * gate(conv2(act(conv1(mean of x over H, W)))), conv1 reducing the channels by `reduction`;
    `gate` a sigmoid unless given; `lr_mult`: the convs' learning-rate multiplier."""

    def __init__(self, channels: int, reduction: int = 4, act: str = "relu", gate: Optional[nn.Layer] = None,
                 lr_mult: float = 1.0) -> None:
        super().__init__()
        attr = (lambda: None) if lr_mult == 1.0 else (lambda: paddle.ParamAttr(learning_rate=lr_mult))
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.conv1 = nn.Conv2D(channels, channels // reduction, 1, weight_attr=attr(), bias_attr=attr())
        self.act = activation(act)
        self.conv2 = nn.Conv2D(channels // reduction, channels, 1, weight_attr=attr(), bias_attr=attr())
        self.gate = nn.Sigmoid() if gate is None else gate

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x * self.gate(self.conv2(self.act(self.conv1(self.avg_pool(x)))))

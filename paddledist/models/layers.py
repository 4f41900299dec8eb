"""Building blocks the model families share (as timm keeps `layers/`): stochastic depth and its per-block
rates, and batch norm exempt from weight decay. Parameter-free or named by the layer that holds them, so
moving them here changes no parameter name (the PaddleClas name/shape/output tests prove it).

Stochastic depth (Huang et al., 2016), as PaddleClas's networks apply it: in training, each sample's branch
is zeroed with probability p and the kept ones are scaled by 1/(1-p); in eval it is the identity."""

from __future__ import annotations

import paddle
import paddle.nn as nn


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


def no_decay() -> paddle.ParamAttr:
    """Batch-norm parameters: exempt from an optimizer-wide L2 regularizer (PaddleClas's L2Decay(0.0))."""
    return paddle.ParamAttr(regularizer=paddle.regularizer.L2Decay(0.0))


def batch_norm(channels: int) -> nn.BatchNorm2D:
    """BatchNorm2D whose scale and shift carry no weight decay, as PaddleClas builds them."""
    return nn.BatchNorm2D(channels, weight_attr=no_decay(), bias_attr=no_decay())

"""Stochastic depth (Huang et al., 2016), as PaddleClas's networks apply it: in training, each sample's branch
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

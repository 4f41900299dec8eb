"""ConvNeXt tiny/small/base/large (PaddleClas model_zoo.convnext), parameter names equal PaddleClas's.

A 4x4 stride-4 stem conv + channels-first LayerNorm, three LayerNorm + 2x2 stride-2 downsamplers, four stages
of blocks (7x7 depthwise conv, LayerNorm over channels-last, Linear 4x, GELU, Linear back, layer scale
`gamma`, stochastic depth rising linearly to drop_path_rate), mean pool, LayerNorm, Linear head.
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import DropPath, drop_path_rates
from paddle.nn.initializer import Constant, TruncatedNormal

VARIANTS = {"tiny": ((3, 3, 9, 3), (96, 192, 384, 768)), "small": ((3, 3, 27, 3), (96, 192, 384, 768)),
            "base": ((3, 3, 27, 3), (128, 256, 512, 1024)), "large": ((3, 3, 27, 3), (192, 384, 768, 1536))}


class ChannelsFirstLayerNorm(nn.Layer):
    """LayerNorm over the channel axis of NCHW (biased variance, as PaddleClas computes it)."""

    def __init__(self, channels: int, epsilon: float = 1e-6) -> None:
        super().__init__()
        self.weight = self.create_parameter([channels], default_initializer=Constant(1.0))
        self.bias = self.create_parameter([channels], default_initializer=Constant(0.0))
        self.epsilon = epsilon

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        # centred * centred, not PaddleClas's .pow(2) (the same numbers): an exported .pow(2) runs as a plain-CPU
        # square between oneDNN ops, and paddle's PIR inplace_pass (3.0.0, 3.3.1) let it overwrite `centred`,
        # which the division still reads (probabilities off by up to 0.26 under oneDNN; inference/verify.py)
        centred = x - x.mean(1, keepdim=True)
        x = centred / paddle.sqrt((centred * centred).mean(1, keepdim=True) + self.epsilon)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class Block(nn.Layer):
    def __init__(self, dim: int, drop: float, scale_init: float) -> None:
        super().__init__()
        self.dwconv = nn.Conv2D(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, epsilon=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.gamma = (self.create_parameter([dim], default_initializer=Constant(scale_init))
                      if scale_init > 0 else None)
        self.drop_path = DropPath(drop) if drop > 0 else nn.Identity()

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        y = self.pwconv2(self.act(self.pwconv1(self.norm(self.dwconv(x).transpose([0, 2, 3, 1])))))
        if self.gamma is not None:
            y = self.gamma * y
        return x + self.drop_path(y.transpose([0, 3, 1, 2]))


class ConvNeXt(nn.Layer):
    def __init__(self, depths, dims, num_classes: int = 1000, drop_path_rate: float = 0.0,
                 layer_scale_init_value: float = 1e-6, head_init_scale: float = 1.0) -> None:
        super().__init__()
        self.downsample_layers = nn.LayerList(
            [nn.Sequential(nn.Conv2D(3, dims[0], 4, stride=4), ChannelsFirstLayerNorm(dims[0]))]
            + [nn.Sequential(ChannelsFirstLayerNorm(dims[i]), nn.Conv2D(dims[i], dims[i + 1], 2, stride=2))
               for i in range(3)])
        total = sum(depths)
        rates = drop_path_rates(drop_path_rate, total)
        starts = [sum(depths[:i]) for i in range(4)]
        self.stages = nn.LayerList(
            [nn.Sequential(*[Block(dims[i], rates[starts[i] + j], layer_scale_init_value)
                             for j in range(depths[i])]) for i in range(4)])
        self.norm = nn.LayerNorm(dims[-1], epsilon=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)
        self.apply(_init_weights)
        if head_init_scale != 1.0:  # x * 1.0 is x; skipping it keeps paddle.LazyGuard builds possible
            self.head.weight.set_value(self.head.weight * head_init_scale)
            self.head.bias.set_value(self.head.bias * head_init_scale)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        for down, stage in zip(self.downsample_layers, self.stages):
            x = stage(down(x))
        return self.head(self.norm(x.mean([-2, -1])))


def _init_weights(m: nn.Layer) -> None:
    if isinstance(m, (nn.Conv2D, nn.Linear)):
        TruncatedNormal(std=0.02)(m.weight)
        if m.bias is not None:
            Constant(0.0)(m.bias)


def convnext(num_classes: int = 1000, input_size: int = 224, size: str = "tiny", **kwargs) -> nn.Layer:
    depths, dims = VARIANTS[size]
    return ConvNeXt(depths, dims, num_classes=num_classes, **kwargs)

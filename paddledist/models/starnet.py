"""StarNet (Ma et al., 2024, "Rewrite the Stars") as PaddleClas defines it (ppcls model_zoo.starnet).

A 3x3 stride-2 conv-BN + ReLU6 stem to 32 channels, four stages, each a 3x3 stride-2 conv-BN down-sampler to
base x 2^i channels followed by star blocks, then batch norm, global pool and a linear head. A star block:
7x7 depthwise conv-BN, two parallel 1x1 convs to 4x width whose outputs multiply (ReLU6 on one of them, the
"star" operation), a 1x1 conv-BN back, a 7x7 depthwise conv, and the residual add (with stochastic depth).
All convs carry a bias. Parameter names equal PaddleClas's (`stem.0`, `stages.{i}.{k}`, `norm`, `head`).
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct, DropPath, drop_path_rates

# variant: (base width, blocks per stage)
VARIANTS = {"S1": (24, (2, 2, 8, 3)), "S2": (32, (1, 2, 6, 2)), "S3": (32, (2, 2, 8, 4)), "S4": (32, (3, 3, 12, 5))}
STEM, MLP_RATIO = 32, 4


def conv_bn(c_in: int, c_out: int, k: int = 1, stride: int = 1, groups: int = 1, bn: bool = True) -> ConvBNAct:
    """StarNet's conv (with bias), then batch norm when `bn`, no activation."""
    return ConvBNAct(c_in, c_out, k, stride, groups, bias=True, bn=bn, decay_bn=True)


class StarBlock(nn.Layer):
    """x + drop_path(dw7(g(relu6(f1(dw7_bn(x))) * f2(dw7_bn(x)))))."""

    def __init__(self, dim: int, drop_path: float) -> None:
        super().__init__()
        self.dwconv = conv_bn(dim, dim, 7, groups=dim)
        self.f1 = conv_bn(dim, MLP_RATIO * dim, bn=False)
        self.f2 = conv_bn(dim, MLP_RATIO * dim, bn=False)
        self.g = conv_bn(MLP_RATIO * dim, dim)
        self.dwconv2 = conv_bn(dim, dim, 7, groups=dim, bn=False)
        self.act = nn.ReLU6()
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        y = self.dwconv(x)
        y = self.dwconv2(self.g(self.act(self.f1(y)) * self.f2(y)))
        return x + self.drop_path(y)


class StarNet(nn.Layer):
    """StarNet of one VARIANTS row; `drop_path_rate` rises linearly over all blocks (PaddleX passes it)."""

    def __init__(self, variant: str, num_classes: int = 1000, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        base, depths = VARIANTS[variant]
        self.stem = nn.Sequential(conv_bn(3, STEM, 3, 2), nn.ReLU6())
        rates = iter(drop_path_rates(drop_path_rate, sum(depths)))
        self.stages = nn.LayerList()
        c_in = STEM
        for i, depth in enumerate(depths):
            dim = base * 2 ** i
            blocks = [StarBlock(dim, next(rates)) for _ in range(depth)]
            self.stages.append(nn.Sequential(conv_bn(c_in, dim, 3, 2), *blocks))
            c_in = dim
        self.norm = nn.BatchNorm2D(c_in)
        self.avgpool = nn.AdaptiveAvgPool2D(1)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(paddle.flatten(self.avgpool(self.norm(x)), start_axis=1))


def starnet(num_classes: int = 1000, input_size: int = 224, variant: str = "S1",
            drop_path_rate: float = 0.0) -> StarNet:
    """Builder for StarNet-S1..S4 (PaddleX's Arch also passes drop_rate: 0, which PaddleClas's StarNet
    swallows unused; it has no dropout)."""
    if variant not in VARIANTS:
        raise ValueError(f"StarNet variant {variant!r} is not one of {sorted(VARIANTS)}")
    return StarNet(variant, num_classes, drop_path_rate)

"""ResNet (He et al., 2015) as PaddleClas defines it: the plain "vb" nets and the "vd" nets (Bag of Tricks).

PaddleClas's ResNet differs from the paper (and from paddle.vision.models.resnet18) in one place: the first
block of EVERY stage has a projection shortcut, stage 1 included, even where channels and stride match.
The vd nets replace the 7x7 stem by three 3x3 convs (32, 32, 64 channels) and, in the first block of stages
2-4, do the shortcut's down-sampling with a 2x2 average pool in front of a stride-1 1x1 conv.

Parameter names follow PaddleClas's so its weight files load by name: `stem.{i}`, then one flat `blocks.{k}`
over all stages (each block `conv0..conv2` and `short`, each a `conv` + `bn` pair), `fc`.
"""

from __future__ import annotations

import math

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct

# depth: (block kind, blocks per stage)
DEPTHS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
    200: ("bottleneck", (3, 12, 48, 3)),
}
WIDTHS = (64, 128, 256, 512)
"""Inner width of each stage; a bottleneck block widens its output 4x."""


class ConvBN(ConvBNAct):
    """Conv-BN, ReLU when `act`; `pool_first` puts the vd shortcut's 2x2 average pool in front, which then does
    the striding instead of the conv."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, act: bool = True,
                 pool_first: bool = False) -> None:
        super().__init__(c_in, c_out, k, 1 if pool_first else stride, act="relu" if act else None, decay_bn=True)
        # 'SAME' + ceil keeps odd sides equal to PaddleClas's.
        self.avg_pool = nn.AvgPool2D(2, stride, padding="SAME", ceil_mode=True) if pool_first else None

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return super().forward(x if self.avg_pool is None else self.avg_pool(x))


class Block(nn.Layer):
    """A residual block: relu(residual(x) + shortcut(x)), the shortcut a 1x1 conv-BN (`short`) in the first
    block of each stage (strided, or behind a 2x2 average pool in vd) and the identity elsewhere."""

    expansion = 1

    def _shortcut(self, c_in: int, c_out: int, stride: int, project: bool, pool_shortcut: bool) -> None:
        self.short = ConvBN(c_in, c_out, 1, stride, act=False, pool_first=pool_shortcut) if project else None
        self.relu = nn.ReLU()

    def residual(self, x: paddle.Tensor) -> paddle.Tensor:
        raise NotImplementedError

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        shortcut = self.short(x) if self.short is not None else x
        return self.relu(self.residual(x) + shortcut)


class BasicBlock(Block):
    """Two 3x3 convs, the first carrying the stride."""

    def __init__(self, c_in: int, width: int, stride: int, project: bool, pool_shortcut: bool) -> None:
        super().__init__()
        self.conv0 = ConvBN(c_in, width, 3, stride)
        self.conv1 = ConvBN(width, width, 3, act=False)
        self._shortcut(c_in, width, stride, project, pool_shortcut)

    def residual(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.conv1(self.conv0(x))


class BottleneckBlock(Block):
    """1x1 reduce, 3x3 (carries the stride), 1x1 expand to 4x the width."""

    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int, project: bool, pool_shortcut: bool) -> None:
        super().__init__()
        self.conv0 = ConvBN(c_in, width, 1)
        self.conv1 = ConvBN(width, width, 3, stride)
        self.conv2 = ConvBN(width, width * 4, 1, act=False)
        self._shortcut(c_in, width * 4, stride, project, pool_shortcut)

    def residual(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.conv2(self.conv1(self.conv0(x)))


def _stem(vd: bool) -> nn.Sequential:
    if not vd:
        return nn.Sequential(ConvBN(3, 64, 7, 2))
    return nn.Sequential(ConvBN(3, 32, 3, 2), ConvBN(32, 32, 3), ConvBN(32, 64, 3))


def _blocks(depth: int, vd: bool) -> tuple[nn.Sequential, int]:
    kind, counts = DEPTHS[depth]
    block = BasicBlock if kind == "basic" else BottleneckBlock
    layers, c_in = [], 64
    for stage, (count, width) in enumerate(zip(counts, WIDTHS)):
        for i in range(count):
            first = i == 0
            # Stage 1 is already down-sampled by the stem's max pool; vd pools the other stages' shortcuts.
            stride = 2 if first and stage > 0 else 1
            layers.append(block(c_in, width, stride, project=first, pool_shortcut=vd and first and stage > 0))
            c_in = width * block.expansion
    return nn.Sequential(*layers), c_in


class ResNet(nn.Layer):
    """ResNet-`depth`, plain (vb) or `vd`, with a `num_classes` linear head on the global average pool."""

    def __init__(self, depth: int, vd: bool = False, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = _stem(vd)
        self.max_pool = nn.MaxPool2D(3, 2, padding=1)
        self.blocks, channels = _blocks(depth, vd)
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.flatten = nn.Flatten()
        bound = 1.0 / math.sqrt(channels)  # PaddleClas's head initialiser, so training from scratch matches
        self.fc = nn.Linear(channels, num_classes,
                            weight_attr=paddle.ParamAttr(initializer=nn.initializer.Uniform(-bound, bound)))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.blocks(self.max_pool(self.stem(x)))
        return self.fc(self.flatten(self.avg_pool(x)))


def resnet(num_classes: int = 1000, input_size: int = 224, depth: int = 50, vd: bool = False) -> ResNet:
    """Builder for every registered ResNet (input_size is not needed: the head follows a global pool)."""
    if depth not in DEPTHS:
        raise ValueError(f"ResNet depth {depth} is not one of {sorted(DEPTHS)}")
    return ResNet(depth, vd, num_classes)

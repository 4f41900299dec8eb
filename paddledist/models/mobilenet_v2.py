"""MobileNetV2 (Sandler et al., 2018) as PaddleClas defines it (ppcls model_zoo.mobilenet_v2).

A 3x3 stride-2 stem, seven groups of inverted residual units (1x1 expansion, 3x3 depthwise, 1x1 linear
projection; ReLU6 after the first two), a 1x1 conv to 1280 channels (1280 x scale above x1.0), global pool
and a linear classifier. Only the units after a group's first add their input: PaddleClas's first unit never
has a shortcut, even where its stride is 1 and the channels match (the first group).

Parameter names follow PaddleClas's weight files: `conv1`, groups `conv2`..`conv8` (first unit `_first_block`,
the others `conv<g>_<k>`), each conv a `_conv` + `_batch_norm` pair, `conv9`, classifier `out`.
"""

from __future__ import annotations

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

# (expansion t, channels c, units n, first stride s) per group, as in the paper's Table 2.
GROUPS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
          (6, 320, 1, 1))
STEM, LAST = 32, 1280


class ConvBN(nn.Layer):
    """Conv (no bias) + batch norm; ReLU6 unless the caller asks for the linear output."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1) -> None:
        super().__init__()
        self._conv = nn.Conv2D(c_in, c_out, k, stride, padding=(k - 1) // 2, groups=groups, bias_attr=False)
        self._batch_norm = nn.BatchNorm2D(c_out)

    def forward(self, x: paddle.Tensor, act: bool = True) -> paddle.Tensor:
        x = self._batch_norm(self._conv(x))
        return F.relu6(x) if act else x


class InvertedResidual(nn.Layer):
    """1x1 expand (x t), 3x3 depthwise (carries the stride), 1x1 linear projection, optional identity add."""

    def __init__(self, c_in: int, c_out: int, stride: int, t: int) -> None:
        super().__init__()
        hidden = int(round(c_in * t))
        self._expand_conv = ConvBN(c_in, hidden, 1)
        self._bottleneck_conv = ConvBN(hidden, hidden, 3, stride, groups=hidden)
        self._linear_conv = ConvBN(hidden, c_out, 1)

    def forward(self, x: paddle.Tensor, shortcut: bool) -> paddle.Tensor:
        y = self._linear_conv(self._bottleneck_conv(self._expand_conv(x)), act=False)
        return x + y if shortcut else y


class Group(nn.Layer):
    """`n` units of one width: the first changes width/stride and has no shortcut, the rest add their input."""

    def __init__(self, name: str, c_in: int, t: int, c: int, n: int, s: int) -> None:
        super().__init__()
        self._first_block = InvertedResidual(c_in, c, s, t)
        self._rest = [self.add_sublayer(f"{name}_{k}", InvertedResidual(c, c, 1, t)) for k in range(2, n + 1)]

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self._first_block(x, shortcut=False)
        for unit in self._rest:
            x = unit(x, shortcut=True)
        return x


class MobileNetV2(nn.Layer):
    """MobileNetV2 at width multiplier `scale` (PaddleClas's MobileNet(scale=...))."""

    def __init__(self, scale: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        c_in = int(STEM * scale)
        self.conv1 = ConvBN(3, c_in, 3, 2)
        self._groups = []
        for g, (t, c, n, s) in enumerate(GROUPS, start=2):
            self._groups.append(self.add_sublayer(f"conv{g}", Group(f"conv{g}", c_in, t, int(c * scale), n, s)))
            c_in = int(c * scale)
        out_c = int(LAST * scale) if scale > 1.0 else LAST  # PaddleClas never narrows the last conv
        self.conv9 = ConvBN(c_in, out_c, 1)
        self.pool2d_avg = nn.AdaptiveAvgPool2D(1)
        self.out = nn.Linear(out_c, num_classes)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.conv1(x)
        for group in self._groups:
            x = group(x)
        x = self.pool2d_avg(self.conv9(x))
        return self.out(paddle.flatten(x, start_axis=1))


def mobilenet_v2(num_classes: int = 1000, input_size: int = 224, scale: float = 1.0) -> MobileNetV2:
    """Builder for MobileNetV2_x0_25 ... x2_0 (input_size is not needed: the head follows a global pool)."""
    return MobileNetV2(scale, num_classes)

"""PP-LCNet (PaddleClas legendary_models.pp_lcnet): a light CPU net of depthwise-separable blocks.

A stem 3x3 conv-BN-hardswish, then five stages (blocks2..blocks6) of depthwise conv-BN-act, an optional SE
(pool, 1x1 conv, ReLU, 1x1 conv, hardsigmoid, multiply) and a pointwise conv-BN-act. Channels are
`make_divisible(c * scale)`. The head: global pool, optional 1x1 "last conv" to `class_expand` + act +
dropout (downscale_in_infer), flatten, linear. `stride_list` sets the stem's and each stage's first stride;
an entry may be a pair (h, w), as the text-line orientation models use for their wide 80x160 inputs.

Convs use KaimingNormal and per-stage learning-rate multipliers; batch-norm parameters carry L2Decay(0).
Unlike PaddleClas, a custom stride_list does not overwrite the module-level table for later builds.
"""

from __future__ import annotations

from typing import Sequence

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct, SqueezeExcite, activation

# stage: [(kernel, in, out, stride, se)], the strides of each stage's first block come from stride_list
NET_CONFIG = (
    ((3, 16, 32, 1, False),),
    ((3, 32, 64, 2, False), (3, 64, 64, 1, False)),
    ((3, 64, 128, 2, False), (3, 128, 128, 1, False)),
    ((3, 128, 256, 2, False),) + ((5, 256, 256, 1, False),) * 5,
    ((5, 256, 512, 2, True), (5, 512, 512, 1, True)),
)


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round channels to a multiple of `divisor`, never more than 10% below v (MobileNet's rule)."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn(c_in: int, k: int, c_out: int, stride, groups: int = 1, lr_mult: float = 1.0,
            act: str = "hardswish") -> ConvBNAct:
    """PP-LCNet's conv-BN-act: KaimingNormal conv, the stage's lr multiplier on conv and batch norm."""
    return ConvBNAct(c_in, c_out, k, stride, groups, act, kaiming=True, lr_mult=lr_mult)


class DepthwiseSeparable(nn.Layer):
    def __init__(self, c_in: int, c_out: int, stride, dw_size: int, use_se: bool, lr_mult: float,
                 act: str) -> None:
        super().__init__()
        self.use_se = use_se
        self.dw_conv = conv_bn(c_in, dw_size, c_in, stride, groups=c_in, lr_mult=lr_mult, act=act)
        if use_se:
            self.se = SqueezeExcite(c_in, gate=nn.Hardsigmoid(), lr_mult=lr_mult)
        self.pw_conv = conv_bn(c_in, 1, c_out, 1, lr_mult=lr_mult, act=act)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.dw_conv(x)
        if self.use_se:
            x = self.se(x)
        return self.pw_conv(x)


class LastConvHead:
    """PP-LCNet's and PP-LCNetV2's head, on the network itself so the parameter names stay PaddleClas's
    (last_conv, fc): pooled features -> [1x1 conv to class_expand, activation, dropout] -> flatten -> fc."""

    def build_head(self, c_in: int, class_expand: int, class_num: int, use_last_conv: bool, act: nn.Layer,
                   dropout_prob: float) -> None:
        self.use_last_conv = use_last_conv
        if use_last_conv:
            self.last_conv = nn.Conv2D(c_in, class_expand, 1, bias_attr=False)
            self.act = act
            self.dropout = nn.Dropout(p=dropout_prob, mode="downscale_in_infer")
        self.flatten = nn.Flatten(start_axis=1, stop_axis=-1)
        self.fc = nn.Linear(class_expand if use_last_conv else c_in, class_num)

    def head(self, x: paddle.Tensor) -> paddle.Tensor:
        if self.use_last_conv:
            x = self.dropout(self.act(self.last_conv(x)))
        return self.fc(self.flatten(x))


class PPLCNet(LastConvHead, nn.Layer):
    def __init__(self, scale: float = 1.0, class_num: int = 1000, dropout_prob: float = 0.2,
                 class_expand: int = 1280, lr_mult_list: Sequence[float] = (1.0,) * 6,
                 stride_list: Sequence = (2, 2, 2, 2, 2), use_last_conv: bool = True,
                 act: str = "hardswish") -> None:
        super().__init__()
        if len(lr_mult_list) != 6 or len(stride_list) != 5:
            raise ValueError("PP-LCNet needs 6 lr multipliers and 5 strides")
        self.conv1 = conv_bn(3, 3, make_divisible(16 * scale), stride_list[0], lr_mult=lr_mult_list[0],
                             act=act)
        for i, stage in enumerate(NET_CONFIG):
            blocks = [DepthwiseSeparable(make_divisible(c_in * scale), make_divisible(c_out * scale),
                                         stride_list[i] if j == 0 and i > 0 else s, k, se,
                                         lr_mult_list[i + 1], act)
                      for j, (k, c_in, c_out, s, se) in enumerate(stage)]
            setattr(self, f"blocks{i + 2}", nn.Sequential(*blocks))
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        last = make_divisible(NET_CONFIG[-1][-1][2] * scale)
        self.build_head(last, class_expand, class_num, use_last_conv, activation(act), dropout_prob)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.conv1(x)
        for i in range(2, 7):
            x = getattr(self, f"blocks{i}")(x)
        return self.head(self.avg_pool(x))


def pp_lcnet(num_classes: int = 1000, input_size: int = 224, scale: float = 1.0, **kwargs) -> PPLCNet:
    """PP-LCNet at width `scale`; kwargs are PPLCNet's (stride_list, use_last_conv, class_expand, ...)."""
    return PPLCNet(scale=scale, class_num=num_classes, **kwargs)

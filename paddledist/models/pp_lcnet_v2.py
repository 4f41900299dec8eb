"""PP-LCNetV2 (PaddleClas legendary_models.pp_lcnet_v2): PP-LCNet with re-parameterisable depthwise convs.

Stem: 3x3 stride-2 conv-BN-act and one depthwise-separable block. Four stages of RepDepthwiseSeparable
blocks: either one depthwise conv-BN-ReLU, or (use_rep) a sum of depthwise conv-BN branches of kernels
k, k-2, ..., 1 (the 1x1 dropped at stride 2) followed by act; then optional SE (ReLU, *sigmoid*, as
PaddleClas has it), a pointwise conv-BN-act (or two, split_pw) and a residual where the shapes allow.
A use_rep block also owns the fused `dw_conv` (with bias) that PaddleClas's re_parameterize fills for
inference; it is in the state_dict but unused in training, as in PaddleClas. Head as PP-LCNet.
"""

from __future__ import annotations

from typing import Sequence

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct, SqueezeExcite, activation
from paddledist.models.pp_lcnet import LastConvHead, make_divisible

# stage: (in_channels, kernel, split_pw, use_rep, use_se, use_shortcut); a stage's blocks output 2x in_channels
NET_CONFIG = (
    (64, 3, False, False, False, False),
    (128, 3, False, False, False, False),
    (256, 5, True, True, True, False),
    (512, 5, False, True, False, True),
)


def conv_bn(c_in: int, c_out: int, k: int, stride: int, groups: int = 1, act: str | None = "relu") -> ConvBNAct:
    """PP-LCNetV2's conv-BN-act (act=None: linear), KaimingNormal conv weights."""
    return ConvBNAct(c_in, c_out, k, stride, groups, act, kaiming=True)


class RepDepthwiseSeparable(nn.Layer):
    def __init__(self, c_in: int, c_out: int, stride: int, dw_size: int = 3, split_pw: bool = False,
                 use_rep: bool = False, use_se: bool = False, use_shortcut: bool = False, act: str = "relu"):
        super().__init__()
        self.use_rep, self.use_se, self.split_pw = use_rep, use_se, split_pw
        self.use_shortcut = use_shortcut and stride == 1 and c_in == c_out
        if use_rep:
            kernels = [k for k in range(dw_size, 0, -2) if not (k == 1 and stride != 1)]
            self.dw_conv_list = nn.LayerList([conv_bn(c_in, c_in, k, stride, c_in, None) for k in kernels])
            self.dw_conv = nn.Conv2D(c_in, c_in, dw_size, stride, padding=(dw_size - 1) // 2, groups=c_in)
        else:
            self.dw_conv = conv_bn(c_in, c_in, dw_size, stride, c_in)  # ReLU whatever `act` is, as PaddleClas
        self.act = activation(act)
        if use_se:
            self.se = SqueezeExcite(c_in, act=act)  # a plain sigmoid gate
        if split_pw:
            self.pw_conv_1 = conv_bn(c_in, int(c_out * 0.5), 1, 1, act=act)
            self.pw_conv_2 = conv_bn(int(c_out * 0.5), c_out, 1, 1, act=act)
        else:
            self.pw_conv = conv_bn(c_in, c_out, 1, 1, act=act)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        identity = x
        if self.use_rep:
            x = self.act(paddle.add_n([branch(x) for branch in self.dw_conv_list]))
        else:
            x = self.dw_conv(x)
        if self.use_se:
            x = self.se(x)
        x = self.pw_conv_2(self.pw_conv_1(x)) if self.split_pw else self.pw_conv(x)
        return x + identity if self.use_shortcut else x


class PPLCNetV2(LastConvHead, nn.Layer):
    def __init__(self, scale: float, depths: Sequence[int], class_num: int = 1000, dropout_prob: float = 0.0,
                 use_last_conv: bool = True, class_expand: int = 1280, act: str = "relu") -> None:
        super().__init__()
        c = lambda v: make_divisible(v * scale)  # noqa: E731
        self.stem = nn.Sequential(conv_bn(3, c(32), 3, 2, act=act),
                                  RepDepthwiseSeparable(c(32), c(64), 1, 3, act=act))
        self.stages = nn.LayerList()
        for depth, (c_in, k, split_pw, use_rep, use_se, shortcut) in zip(depths, NET_CONFIG):
            self.stages.append(nn.Sequential(*[
                RepDepthwiseSeparable(c(c_in if i == 0 else c_in * 2), c(c_in * 2), 2 if i == 0 else 1, k,
                                      split_pw, use_rep, use_se, shortcut, act) for i in range(depth)]))
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        last = c(NET_CONFIG[-1][0] * 2)
        self.build_head(last, class_expand, class_num, use_last_conv, activation(act), dropout_prob)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(self.avg_pool(x))


VARIANTS = {"small": (0.75, (2, 2, 4, 2)), "base": (1.0, (2, 2, 6, 2)), "large": (1.25, (2, 2, 8, 2))}


def pp_lcnet_v2(num_classes: int = 1000, input_size: int = 224, size: str = "base", **kwargs) -> PPLCNetV2:
    scale, depths = VARIANTS[size]
    return PPLCNetV2(scale, depths, class_num=num_classes, dropout_prob=0.2, **kwargs)

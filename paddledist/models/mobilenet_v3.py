"""MobileNetV3 large/small (PaddleClas legendary_models.mobilenet_v3).

Stem 3x3 stride-2 conv-BN-hardswish, inverted-residual units (1x1 expand conv-BN-act, depthwise kxk
conv-BN-act, optional SE with hardsigmoid(slope 0.2, offset 0.5), 1x1 linear conv-BN, residual when
stride 1 and channels match), a 1x1 "last second" conv-BN-hardswish, global pool, a 1x1 conv to 1280 with
hardswish, dropout 0.2 (downscale_in_infer), linear. Channels are make_divisible(c * scale); batch-norm
scales and shifts carry L2Decay(0) as in PaddleClas (whose legacy BatchNorm layer has the same names).
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct, HardSigmoid, SqueezeExcite
from paddledist.models.pp_lcnet import make_divisible

# (kernel, expanded, out, se, act, stride) per unit
NET_CONFIG = {
    "large": ((3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
              (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
              (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
              (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
              (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
              (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
              (5, 960, 160, True, "hardswish", 1)),
    "small": ((3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
              (5, 96, 40, True, "hardswish", 2), (5, 240, 40, True, "hardswish", 1),
              (5, 240, 40, True, "hardswish", 1), (5, 120, 48, True, "hardswish", 1),
              (5, 144, 48, True, "hardswish", 1), (5, 288, 96, True, "hardswish", 2),
              (5, 576, 96, True, "hardswish", 1), (5, 576, 96, True, "hardswish", 1)),
}
CLASS_SQUEEZE = {"large": 960, "small": 576}


def se_module(channels: int) -> SqueezeExcite:
    return SqueezeExcite(channels, gate=HardSigmoid(slope=0.2))


class ResidualUnit(nn.Layer):
    def __init__(self, c_in: int, mid: int, c_out: int, k: int, stride: int, use_se: bool, act: str) -> None:
        super().__init__()
        self.if_shortcut = stride == 1 and c_in == c_out
        self.if_se = use_se
        self.expand_conv = ConvBNAct(c_in, mid, 1, 1, act=act)
        self.bottleneck_conv = ConvBNAct(mid, mid, k, stride, groups=mid, act=act)
        if use_se:
            self.mid_se = se_module(mid)
        self.linear_conv = ConvBNAct(mid, c_out, 1, 1)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        y = self.bottleneck_conv(self.expand_conv(x))
        if self.if_se:
            y = self.mid_se(y)
        y = self.linear_conv(y)
        return x + y if self.if_shortcut else y


class MobileNetV3(nn.Layer):
    def __init__(self, size: str, scale: float = 1.0, class_num: int = 1000, inplanes: int = 16,
                 class_expand: int = 1280, dropout_prob: float | None = 0.2) -> None:
        super().__init__()
        cfg, c = NET_CONFIG[size], (lambda v: make_divisible(v * scale))
        self.conv = ConvBNAct(3, c(inplanes), 3, 2, act="hardswish")
        ins = [inplanes] + [unit[2] for unit in cfg[:-1]]
        self.blocks = nn.Sequential(*[ResidualUnit(c(c_in), c(exp), c(out), k, s, se, act)
                                      for c_in, (k, exp, out, se, act, s) in zip(ins, cfg)])
        squeeze = c(CLASS_SQUEEZE[size])
        self.last_second_conv = ConvBNAct(c(cfg[-1][2]), squeeze, 1, 1, act="hardswish")
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.last_conv = nn.Conv2D(squeeze, class_expand, 1, bias_attr=False)
        self.hardswish = nn.Hardswish()
        self.dropout = nn.Dropout(p=dropout_prob, mode="downscale_in_infer") if dropout_prob is not None else None
        self.flatten = nn.Flatten(start_axis=1, stop_axis=-1)
        self.fc = nn.Linear(class_expand, class_num)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.avg_pool(self.last_second_conv(self.blocks(self.conv(x))))
        x = self.hardswish(self.last_conv(x))
        if self.dropout is not None:
            x = self.dropout(x)
        return self.fc(self.flatten(x))


def mobilenet_v3(num_classes: int = 1000, input_size: int = 224, size: str = "large",
                 scale: float = 1.0) -> MobileNetV3:
    return MobileNetV3(size, scale=scale, class_num=num_classes)

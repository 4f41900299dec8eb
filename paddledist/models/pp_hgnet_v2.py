"""PP-HGNetV2 B0-B6 (PaddleClas legendary_models.pp_hgnet_v2).

Changes from PP-HGNet (paddledist.models.pp_hgnet): a stem of two branches (a 2x2 max pool beside two 2x2
convs, both 'SAME'-padded on the bottom/right, concatenated, then a stride-2 3x3 and a 1x1 conv); blocks
aggregate with a 1x1 squeeze to half the output width and a 1x1 excitation back (no ESE); stages 3-4 use
"light" layers (1x1 conv-BN, then depthwise kxk conv-BN-ReLU, k=5); the stem has no max pool after it.

B0-B3 put a LearnableAffineBlock (`lab`: y = scale * x + bias, two scalars) after every ReLU and after the
head's ReLU. Its two parameters learn at 0.01x the base learning rate, as in PaddleClas (ParamAttr), and
batch-norm parameters are exempt from L2 decay. Parameter names equal PaddleClas's.
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models import layers
from paddledist.models.pp_hgnet import HEAD_CHANNELS, init_weights

LAB_LR = 0.01
"""Learning-rate multiplier of the LearnableAffineBlock scalars."""


def _small(c1: int, m1: int, c2: int, m2: int, c3: int, m3: int, c4: int, m4: int, n3: int, layers: int) -> tuple:
    """B0-B3's shared layout: one block per stage but stage 3 (n3), the last stage doubling its input."""
    return ((c1, m1, c2, 1, False, False, 3, layers), (c2, m2, c3, 1, True, False, 3, layers),
            (c3, m3, c4, n3, True, True, 5, layers), (c4, m4, 2 * c4, 1, True, True, 5, layers))


# name: (stem (in, mid, out), use_lab, stages as (in, mid, out, blocks, downsample, light, kernel, layers))
VARIANTS = {
    "B0": ((3, 16, 16), True, _small(16, 16, 64, 32, 256, 64, 512, 128, 2, 3)),
    "B1": ((3, 24, 32), True, _small(32, 32, 64, 48, 256, 96, 512, 192, 2, 3)),
    "B2": ((3, 24, 32), True, _small(32, 32, 96, 64, 384, 128, 768, 256, 3, 4)),
    "B3": ((3, 24, 32), True, _small(32, 32, 128, 64, 512, 128, 1024, 256, 3, 5)),
    "B4": ((3, 32, 48), False, ((48, 48, 128, 1, False, False, 3, 6), (128, 96, 512, 1, True, False, 3, 6),
                                (512, 192, 1024, 3, True, True, 5, 6), (1024, 384, 2048, 1, True, True, 5, 6))),
    "B5": ((3, 32, 64), False, ((64, 64, 128, 1, False, False, 3, 6), (128, 128, 512, 2, True, False, 3, 6),
                                (512, 256, 1024, 5, True, True, 5, 6), (1024, 512, 2048, 2, True, True, 5, 6))),
    "B6": ((3, 48, 96), False, ((96, 96, 192, 2, False, False, 3, 6), (192, 192, 512, 3, True, False, 3, 6),
                                (512, 384, 1024, 6, True, True, 5, 6), (1024, 768, 2048, 3, True, True, 5, 6))),
}


class LearnableAffineBlock(nn.Layer):
    """y = scale * x + bias with scalar scale (init 1) and bias (init 0), learning at LAB_LR x."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = self.create_parameter([1], attr=paddle.ParamAttr(learning_rate=LAB_LR),
                                           default_initializer=nn.initializer.Constant(1.0))
        self.bias = self.create_parameter([1], attr=paddle.ParamAttr(learning_rate=LAB_LR),
                                          default_initializer=nn.initializer.Constant(0.0))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.scale * x + self.bias


class ConvBNAct(layers.ConvBNAct):
    """Conv-BN, then ReLU (+ LAB when `lab`) when `act`. `same`: TF-style 'SAME' padding, which for the
    stem's even 2x2 kernels pads only the bottom and right."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, stride: int = 1, groups: int = 1, act: bool = True,
                 lab: bool = False, same: bool = False) -> None:
        super().__init__(c_in, c_out, k, stride, groups, "relu" if act else None, padding="SAME" if same else None)
        self.lab = LearnableAffineBlock() if act and lab else None

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = super().forward(x)
        return x if self.lab is None else self.lab(x)


class LightConvBNAct(nn.Layer):
    """1x1 conv-BN (no activation), then depthwise kxk conv-BN-ReLU(-LAB)."""

    def __init__(self, c_in: int, c_out: int, k: int, lab: bool) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(c_in, c_out, 1, act=False, lab=lab)
        self.conv2 = ConvBNAct(c_out, c_out, k, groups=c_out, lab=lab)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.conv2(self.conv1(x))


class StemBlock(nn.Layer):
    """stem1 (3x3 stride 2), then [2x2 max pool | stem2a -> stem2b] concatenated, stem3 (3x3 stride 2), stem4."""

    def __init__(self, c_in: int, mid: int, c_out: int, lab: bool) -> None:
        super().__init__()
        self.stem1 = ConvBNAct(c_in, mid, 3, 2, lab=lab)
        self.stem2a = ConvBNAct(mid, mid // 2, 2, lab=lab, same=True)
        self.stem2b = ConvBNAct(mid // 2, mid, 2, lab=lab, same=True)
        self.stem3 = ConvBNAct(mid * 2, mid, 3, 2, lab=lab)
        self.stem4 = ConvBNAct(mid, c_out, 1, lab=lab)
        self.pool = nn.MaxPool2D(2, 1, padding="SAME", ceil_mode=True)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.stem1(x)
        x = paddle.concat([self.pool(x), self.stem2b(self.stem2a(x))], axis=1)
        return self.stem4(self.stem3(x))


class HGV2Block(nn.Layer):
    """`layers` chained (light) convs, input and all outputs concatenated, 1x1 squeeze + 1x1 excitation."""

    def __init__(self, c_in: int, mid: int, c_out: int, k: int, layers: int, identity: bool, light: bool,
                 lab: bool) -> None:
        super().__init__()
        self.identity = identity
        make = (lambda i, o: LightConvBNAct(i, o, k, lab)) if light else (lambda i, o: ConvBNAct(i, o, k, lab=lab))
        self.layers = nn.LayerList([make(c_in if i == 0 else mid, mid) for i in range(layers)])
        self.aggregation_squeeze_conv = ConvBNAct(c_in + layers * mid, c_out // 2, 1, lab=lab)
        self.aggregation_excitation_conv = ConvBNAct(c_out // 2, c_out, 1, lab=lab)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features[-1]))
        y = self.aggregation_squeeze_conv(paddle.concat(features, axis=1))
        y = self.aggregation_excitation_conv(y)
        return y + x if self.identity else y


class HGV2Stage(nn.Layer):
    """Optional depthwise stride-2 conv-BN, then `blocks` HGV2 blocks (all but the first residual)."""

    def __init__(self, c_in: int, mid: int, c_out: int, blocks: int, downsample: bool, light: bool, k: int,
                 layers: int, lab: bool) -> None:
        super().__init__()
        if downsample:
            self.downsample = ConvBNAct(c_in, c_in, 3, 2, groups=c_in, act=False, lab=lab)
        self.use_downsample = downsample
        self.blocks = nn.Sequential(*[
            HGV2Block(c_in if i == 0 else c_out, mid, c_out, k, layers, i > 0, light, lab) for i in range(blocks)])

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.blocks(self.downsample(x) if self.use_downsample else x)


class PPHGNetV2(nn.Layer):
    """PP-HGNetV2-<variant>: stem block, 4 stages, global pool, 1x1 conv head (+ LAB), linear."""

    def __init__(self, variant: str, num_classes: int = 1000, dropout: float = 0.0) -> None:
        super().__init__()
        stem, lab, stages = VARIANTS[variant]
        self.stem = StemBlock(*stem, lab=lab)
        self.stages = nn.LayerList([HGV2Stage(*stage, lab=lab) for stage in stages])
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.last_conv = nn.Conv2D(stages[-1][2], HEAD_CHANNELS, 1, bias_attr=False)
        self.act = nn.ReLU()
        self.use_lab = lab
        if lab:
            self.lab = LearnableAffineBlock()
        self.dropout = nn.Dropout(p=dropout, mode="downscale_in_infer")
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(HEAD_CHANNELS, num_classes)
        init_weights(self)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        x = self.act(self.last_conv(self.avg_pool(x)))
        if self.use_lab:
            x = self.lab(x)
        return self.fc(self.flatten(self.dropout(x)))


def pp_hgnet_v2(num_classes: int = 1000, input_size: int = 224, variant: str = "B0",
                dropout: float = 0.0) -> PPHGNetV2:
    """Builder for PP-HGNetV2-B0..B6 (input_size is not needed: the head follows a global pool)."""
    if variant not in VARIANTS:
        raise ValueError(f"PP-HGNetV2 variant {variant!r} is not one of {sorted(VARIANTS)}")
    return PPHGNetV2(variant, num_classes, dropout)

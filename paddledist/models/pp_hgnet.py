"""PP-HGNet (PaddleClas legendary_models.pp_hgnet): a high-performance GPU net of HG blocks.

An HG block runs `layer_num` 3x3 conv-BN-ReLUs in a chain, concatenates the block input with every
intermediate output, aggregates them with a 1x1 conv and re-weights channels with ESE (effective squeeze
and excitation: global pool, one 1x1 conv with bias, sigmoid). Blocks after a stage's first add their input.
Stages 2-4 start with a depthwise 3x3 stride-2 conv-BN. The head: global pool, 1x1 conv to 2048 + ReLU,
dropout (PaddleClas's "downscale_in_infer": eval multiplies by 1-p), linear.

Batch-norm scales and shifts carry an L2Decay(0) regularizer as in PaddleClas, so an L2-regularised
optimizer leaves them undecayed. Parameter names equal PaddleClas's.
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct

# size: (stem channels, layers per HG block, dropout, stages as (in, mid, out, blocks, downsample))
VARIANTS = {
    "tiny": ((48, 48, 96), 5, 0.0,
             ((96, 96, 224, 1, False), (224, 128, 448, 1, True), (448, 160, 512, 2, True), (512, 192, 768, 1, True))),
    "small": ((64, 64, 128), 6, 0.0,
              ((128, 128, 256, 1, False), (256, 160, 512, 1, True), (512, 192, 768, 2, True),
               (768, 224, 1024, 1, True))),
    "base": ((96, 96, 160), 7, 0.2,
             ((160, 192, 320, 1, False), (320, 224, 640, 2, True), (640, 256, 960, 3, True),
              (960, 288, 1280, 2, True))),
}
HEAD_CHANNELS = 2048


def conv_bn(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: str | None = "relu") -> ConvBNAct:
    """PP-HGNet's conv-BN-ReLU (act=None: linear)."""
    return ConvBNAct(c_in, c_out, k, stride, groups, act)


class ESEModule(nn.Layer):
    """Channel attention: x * sigmoid(conv1x1(mean over H, W))."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.conv = nn.Conv2D(channels, channels, 1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x * self.sigmoid(self.conv(self.avg_pool(x)))


class HGBlock(nn.Layer):
    """`layer_num` chained 3x3 convs, all outputs and the input concatenated, 1x1 aggregation, ESE."""

    def __init__(self, c_in: int, mid: int, c_out: int, layer_num: int, identity: bool) -> None:
        super().__init__()
        self.identity = identity
        self.layers = nn.LayerList([conv_bn(c_in if i == 0 else mid, mid, 3) for i in range(layer_num)])
        self.aggregation_conv = conv_bn(c_in + layer_num * mid, c_out, 1)
        self.att = ESEModule(c_out)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features[-1]))
        y = self.att(self.aggregation_conv(paddle.concat(features, axis=1)))
        return y + x if self.identity else y


class HGStage(nn.Layer):
    """Optional depthwise stride-2 down-sampling, then `blocks` HG blocks (all but the first residual)."""

    def __init__(self, c_in: int, mid: int, c_out: int, blocks: int, downsample: bool, layer_num: int) -> None:
        super().__init__()
        if downsample:
            self.downsample = conv_bn(c_in, c_in, 3, 2, groups=c_in, act=None)
        self.use_downsample = downsample
        self.blocks = nn.Sequential(*[HGBlock(c_in if i == 0 else c_out, mid, c_out, layer_num, identity=i > 0)
                                      for i in range(blocks)])

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.blocks(self.downsample(x) if self.use_downsample else x)


def init_weights(model: nn.Layer) -> None:
    """PaddleClas's initialisation (Kaiming-normal convs, unit/zero batch norms, zero linear biases), so
    that training from scratch starts where theirs does."""
    kaiming, zeros, ones = nn.initializer.KaimingNormal(), nn.initializer.Constant(0.0), nn.initializer.Constant(1.0)
    for layer in model.sublayers():
        if isinstance(layer, nn.Conv2D):
            kaiming(layer.weight)
        elif isinstance(layer, nn.BatchNorm2D):
            ones(layer.weight)
            zeros(layer.bias)
        elif isinstance(layer, nn.Linear):
            zeros(layer.bias)


class PPHGNet(nn.Layer):
    """PP-HGNet of one VARIANTS size: 3 stem convs (the first stride 2), max pool, 4 stages, conv head."""

    def __init__(self, size: str, num_classes: int = 1000) -> None:
        super().__init__()
        stem, layer_num, dropout, stages = VARIANTS[size]
        widths = (3,) + stem
        self.stem = nn.Sequential(*[conv_bn(widths[i], widths[i + 1], 3, 2 if i == 0 else 1)
                                    for i in range(len(stem))])
        self.pool = nn.MaxPool2D(3, 2, padding=1)
        self.stages = nn.LayerList([HGStage(c_in, mid, c_out, n, down, layer_num)
                                    for c_in, mid, c_out, n, down in stages])
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.last_conv = nn.Conv2D(stages[-1][2], HEAD_CHANNELS, 1, bias_attr=False)
        self.act = nn.ReLU()
        self.dropout = nn.Dropout(p=dropout, mode="downscale_in_infer")
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(HEAD_CHANNELS, num_classes)
        init_weights(self)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.pool(self.stem(x))
        for stage in self.stages:
            x = stage(x)
        x = self.dropout(self.act(self.last_conv(self.avg_pool(x))))
        return self.fc(self.flatten(x))


def pp_hgnet(num_classes: int = 1000, input_size: int = 224, size: str = "tiny") -> PPHGNet:
    """Builder for PP-HGNet_tiny/_small/_base (input_size is not needed: the head follows a global pool)."""
    if size not in VARIANTS:
        raise ValueError(f"PP-HGNet size {size!r} is not one of {sorted(VARIANTS)}")
    return PPHGNet(size, num_classes)

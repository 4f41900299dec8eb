"""MobileNetV1 (PaddleClas legendary_models.mobilenet_v1): a 3x3 stride-2 conv-BN-ReLU stem and 13
depthwise-separable blocks (depthwise 3x3 conv-BN-ReLU, pointwise 1x1 conv-BN-ReLU), global pool, linear.

Channels are int(c * scale) (no make_divisible). Convs and the classifier use KaimingNormal; batch norms
have no parameter attributes (PaddleClas's legacy BatchNorm layer: same names, momentum 0.9, eps 1e-5).
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct

# (pointwise out, stride) of the 13 blocks; each depthwise conv keeps its input's channels
BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)) + ((512, 1),) * 5 + ((1024, 2), (1024, 1))


def kaiming() -> paddle.ParamAttr:
    return paddle.ParamAttr(initializer=nn.initializer.KaimingNormal())


def conv_bn_relu(c_in: int, c_out: int, k: int, stride: int, groups: int = 1) -> ConvBNAct:
    return ConvBNAct(c_in, c_out, k, stride, groups, "relu", kaiming=True, decay_bn=True)


class DepthwiseSeparable(nn.Layer):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.depthwise_conv = conv_bn_relu(c_in, c_in, 3, stride, groups=c_in)
        self.pointwise_conv = conv_bn_relu(c_in, c_out, 1, 1)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.pointwise_conv(self.depthwise_conv(x))


class MobileNet(nn.Layer):
    def __init__(self, scale: float = 1.0, class_num: int = 1000) -> None:
        super().__init__()
        self.conv = conv_bn_relu(3, int(32 * scale), 3, 2)
        # PaddleClas computes int(c * scale) per block: int(64 * 0.75) = 48, never the rounded product chain
        c_ins = [32] + [c for c, _ in BLOCKS[:-1]]
        self.blocks = nn.Sequential(*[DepthwiseSeparable(int(c_in * scale), int(c_out * scale), s)
                                      for c_in, (c_out, s) in zip(c_ins, BLOCKS)])
        self.avg_pool = nn.AdaptiveAvgPool2D(1)
        self.flatten = nn.Flatten(start_axis=1, stop_axis=-1)
        self.fc = nn.Linear(int(1024 * scale), class_num, weight_attr=kaiming())

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.avg_pool(self.blocks(self.conv(x)))
        return self.fc(self.flatten(x))


def mobilenet_v1(num_classes: int = 1000, input_size: int = 224, scale: float = 1.0) -> MobileNet:
    return MobileNet(scale=scale, class_num=num_classes)

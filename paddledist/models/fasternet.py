"""FasterNet (Chen et al., 2023, "Run, Don't Walk") as PaddleClas defines it (ppcls model_zoo.fasternet).

A 4x4 stride-4 patch-embedding conv-BN, four stages of FasterNet blocks with 2x2 stride-2 conv-BN merging
(doubling the width) between them, then global pool, a 1x1 conv to 1280 + activation, and a linear head.
A block: a partial conv (a 3x3 conv over the first quarter of the channels, the rest passed through), then
a 1x1 conv to 2x width, BN, activation (GELU for T0/T1, ReLU above), a 1x1 conv back, added to the block's
input through stochastic depth. No conv has a bias.

As in PaddleClas: conv and linear weights start truncated-normal (std 0.02), linear biases at zero, and the
patch-embedding batch norm alone uses momentum 0.1 (its moving averages follow each batch 9x faster than
the others' 0.9). Parameter names equal PaddleClas's (`patch_embed`, `stages.{k}`, `avgpool_pre_head.1`,
`head`), the stages' Sequential interleaving block stages (even k) and mergings (odd k).
"""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import DropPath, activation, drop_path_rates

# variant: (embedding width, blocks per stage, drop_path_rate, activation), PaddleClas's NET_CONFIG
VARIANTS = {
    "T0": (40, (1, 2, 8, 2), 0.0, "gelu"),
    "T1": (64, (1, 2, 8, 2), 0.02, "gelu"),
    "T2": (96, (1, 2, 8, 2), 0.05, "relu"),
    "S": (128, (1, 2, 13, 2), 0.1, "relu"),
    "M": (144, (3, 4, 18, 3), 0.2, "relu"),
    "L": (192, (3, 4, 18, 3), 0.3, "relu"),
}
MLP_RATIO, N_DIV, FEATURES = 2, 4, 1280


class PartialConv(nn.Layer):
    """3x3 conv over the first dim // 4 channels; the others pass untouched."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.split = [dim // N_DIV, dim - dim // N_DIV]
        self.partial_conv3 = nn.Conv2D(self.split[0], self.split[0], 3, padding=1, bias_attr=False)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        head, rest = paddle.split(x, self.split, axis=1)
        return paddle.concat([self.partial_conv3(head), rest], axis=1)


class FasterBlock(nn.Layer):
    """x + drop_path(mlp(partial_conv(x))), mlp = 1x1 up, BN, activation, 1x1 down."""

    def __init__(self, dim: int, drop_path: float, act: str) -> None:
        super().__init__()
        hidden = int(dim * MLP_RATIO)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.mlp = nn.Sequential(nn.Conv2D(dim, hidden, 1, bias_attr=False), nn.BatchNorm2D(hidden),
                                 activation(act), nn.Conv2D(hidden, dim, 1, bias_attr=False))
        self.spatial_mixing = PartialConv(dim)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x + self.drop_path(self.mlp(self.spatial_mixing(x)))


class BlockStage(nn.Layer):
    def __init__(self, dim: int, rates: list[float], act: str) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[FasterBlock(dim, rate, act) for rate in rates])

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.blocks(x)


class PatchEmbed(nn.Layer):
    """4x4 stride-4 conv + batch norm with momentum 0.1 (PaddleClas's choice for this norm only)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2D(3, dim, 4, 4, bias_attr=False)
        self.norm = nn.BatchNorm2D(dim, momentum=0.1)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.norm(self.proj(x))


class PatchMerging(nn.Layer):
    """2x2 stride-2 conv doubling the width + batch norm."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Conv2D(dim, 2 * dim, 2, 2, bias_attr=False)
        self.norm = nn.BatchNorm2D(2 * dim)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.norm(self.reduction(x))


def init_weights(model: nn.Layer) -> None:
    """PaddleClas's cls_init_weights: truncated-normal (std 0.02) conv and linear weights, zero biases."""
    trunc, zeros = nn.initializer.TruncatedNormal(std=0.02), nn.initializer.Constant(0.0)
    for layer in model.sublayers():
        if isinstance(layer, (nn.Linear, nn.Conv2D)):
            trunc(layer.weight)
            if layer.bias is not None:
                zeros(layer.bias)


class FasterNet(nn.Layer):
    def __init__(self, variant: str, num_classes: int = 1000) -> None:
        super().__init__()
        dim, depths, drop_path_rate, act = VARIANTS[variant]
        self.patch_embed = PatchEmbed(dim)
        rates = drop_path_rates(drop_path_rate, sum(depths))
        stages = []
        for i, depth in enumerate(depths):
            stages.append(BlockStage(dim * 2 ** i, rates[sum(depths[:i]):sum(depths[:i + 1])], act))
            if i < len(depths) - 1:
                stages.append(PatchMerging(dim * 2 ** i))
        self.stages = nn.Sequential(*stages)
        width = dim * 2 ** (len(depths) - 1)
        self.avgpool_pre_head = nn.Sequential(nn.AdaptiveAvgPool2D(1),
                                              nn.Conv2D(width, FEATURES, 1, bias_attr=False), activation(act))
        self.head = nn.Linear(FEATURES, num_classes)
        init_weights(self)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.avgpool_pre_head(self.stages(self.patch_embed(x)))
        return self.head(paddle.flatten(x, start_axis=1))


def fasternet(num_classes: int = 1000, input_size: int = 224, variant: str = "T0") -> FasterNet:
    """Builder for FasterNet-T0/T1/T2/S/M/L (input_size is not needed: the head follows a global pool)."""
    if variant not in VARIANTS:
        raise ValueError(f"FasterNet variant {variant!r} is not one of {sorted(VARIANTS)}")
    return FasterNet(variant, num_classes)

"""MobileNetV4 (Qin et al., 2024) as PaddleClas defines it (ppcls legendary_models.mobilenet_v4).

A conv-BN-act stem, one flat `blocks` Sequential of four kinds (`cn` conv-BN-act, `er` edge residual, `uir`
universal inverted bottleneck, `mqa` mobile multi-query attention in the hybrid nets), global pool, a 1x1
conv-BN-act to 1280 and a linear classifier. Parameter names equal PaddleClas's (`conv_stem`,
`blocks.{i}.<part>`, `conv_head`, `classifier`). Each block kind and PaddleClas's quirks that we keep:
docs/design_notes.md, "MobileNetV4"."""

from __future__ import annotations

import paddle
import paddle.nn as nn

from paddledist.models.layers import ConvBNAct, DropPath, batch_norm

# Blocks: ("cn", out, k, stride), ("er", out, mid, k, stride), ("uir", out, mid, k_start, k_mid, stride),
# ("mqa", out, kv_dim, k, heads, kv_stride); k = 0 means that depthwise conv is absent.
def _uirs(out: int, rows: str, stride: int = 1) -> list:
    """uir rows from "mid:k_start:k_mid" items; the first gets `stride`."""
    items = [tuple(int(v) for v in row.split(":")) for row in rows.split()]
    return [("uir", out, mid, ks, km, stride if i == 0 else 1) for i, (mid, ks, km) in enumerate(items)]


def _mqa(out: int, kv_dim: int, heads: int, kv_stride: int) -> tuple:
    return ("mqa", out, kv_dim, 3, heads, kv_stride)


CONV_SMALL = [("cn", 32, 3, 2), ("cn", 32, 1, 1), ("cn", 96, 3, 2), ("cn", 64, 1, 1),
              *_uirs(96, "192:5:5 192:0:3 192:0:3 192:0:3 192:0:3 384:3:0", 2),
              *_uirs(128, "576:3:3 512:5:5 512:0:5 384:0:5 512:0:3 512:0:3", 2), ("cn", 960, 1, 1)]
CONV_MEDIUM = [("er", 48, 128, 3, 2), *_uirs(80, "192:3:5 160:3:3", 2),
               *_uirs(160, "480:3:5 640:3:3 640:3:3 640:3:5 640:3:3 640:3:0 320:0:0 640:3:0", 2),
               *_uirs(256, "960:5:5 1024:5:5 1024:3:5 1024:3:5 1024:0:0 1024:3:0 512:3:5 1024:5:5 1024:0:0 "
                           "1024:0:0 512:5:0", 2), ("cn", 960, 1, 1)]
CONV_LARGE = [("er", 48, 96, 3, 2), *_uirs(96, "192:3:5 384:3:3", 2),
              *_uirs(192, "384:3:5 768:3:3 768:3:3 768:3:3 768:3:5 768:5:3 768:5:3 768:5:3 768:5:3 768:5:3 "
                          "768:3:0", 2),
              *_uirs(512, "768:5:5 2048:5:5 2048:5:5 2048:5:5 2048:5:0 2048:5:3 2048:5:0 2048:5:0 2048:5:3 "
                          "2048:5:5 2048:5:0 2048:5:0 2048:5:0", 2), ("cn", 960, 1, 1)]
HYBRID_MEDIUM = [("er", 48, 128, 3, 2), *_uirs(80, "192:3:5 160:3:3", 2),
                 *_uirs(160, "480:3:5 320:0:0 640:3:3 640:3:5", 2),
                 _mqa(160, 64, 4, 2), *_uirs(160, "640:3:3"), _mqa(160, 64, 4, 2), *_uirs(160, "640:3:0"),
                 _mqa(160, 64, 4, 2), *_uirs(160, "640:3:3"), _mqa(160, 64, 4, 2), *_uirs(160, "640:3:0"),
                 *_uirs(256, "960:5:5 1024:5:5 1024:3:5 1024:3:5 512:0:0 512:3:5 512:0:0 1024:0:0", 2),
                 _mqa(256, 64, 4, 1), *_uirs(256, "1024:3:0"), _mqa(256, 64, 4, 1), *_uirs(256, "1024:5:5"),
                 _mqa(256, 64, 4, 1), *_uirs(256, "1024:5:0"), _mqa(256, 64, 4, 1), *_uirs(256, "1024:5:0"),
                 ("cn", 960, 1, 1)]
HYBRID_LARGE = [("er", 48, 96, 3, 2), *_uirs(96, "192:3:5 384:3:3", 2),
                *_uirs(192, "384:3:5 768:3:3 768:3:3 768:3:3 768:3:5 768:5:3 768:5:3", 2),
                _mqa(192, 48, 8, 2), *_uirs(192, "768:5:3"), _mqa(192, 48, 8, 2), *_uirs(192, "768:5:3"),
                _mqa(192, 48, 8, 2), *_uirs(192, "768:5:3"), _mqa(192, 48, 8, 2), *_uirs(192, "768:3:0"),
                *_uirs(512, "768:5:5 2048:5:5 2048:5:5 2048:5:5 2048:5:0 2048:5:3 2048:5:0 2048:5:0 2048:5:3 "
                            "2048:5:5", 2),
                _mqa(512, 64, 8, 1), *_uirs(512, "2048:5:0"), _mqa(512, 64, 8, 1), *_uirs(512, "2048:5:0"),
                _mqa(512, 64, 8, 1), *_uirs(512, "2048:5:0"), _mqa(512, 64, 8, 1), *_uirs(512, "2048:5:0"),
                ("cn", 960, 1, 1)]
# variant: (blocks, stem width, activation, layer-scale init)
VARIANTS = {
    "conv_small": (CONV_SMALL, 32, "relu", 0.0),
    "conv_medium": (CONV_MEDIUM, 32, "relu", 0.0),
    "conv_large": (CONV_LARGE, 24, "relu", 0.0),
    "hybrid_medium": (HYBRID_MEDIUM, 32, "relu", 1e-5),
    "hybrid_large": (HYBRID_LARGE, 24, "gelu", 1e-5),
}
HEAD = 1280


class ConvBnAct(ConvBNAct):
    """Conv-BN(-act), then stochastic depth over the whole output when `drop_path` > 0 (only `cn` blocks)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: str | None = None,
                 drop_path: float = 0.0) -> None:
        super().__init__(c_in, c_out, k, stride, groups, act)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else None

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = super().forward(x)
        return x if self.drop_path is None else self.drop_path(x)


class LayerScale2D(nn.Layer):
    """Per-channel learnt scale `gamma` of an NCHW tensor."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = self.create_parameter([dim], default_initializer=nn.initializer.Constant(init))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x * self.gamma.reshape([1, -1, 1, 1])


class Residual(nn.Layer):
    """A block's ending: optional LayerScale, then input + drop_path(branch) where stride and width allow."""

    def _ending(self, c_in: int, c_out: int, stride: int, drop_path: float, layer_scale: float = 0.0) -> None:
        self.shortcut = stride == 1 and c_in == c_out
        if layer_scale > 0:
            self.layer_scale = LayerScale2D(c_out, layer_scale)
        self.use_layer_scale = layer_scale > 0
        self.drop_path = DropPath(drop_path) if drop_path else nn.Identity()

    def _end(self, x: paddle.Tensor, y: paddle.Tensor) -> paddle.Tensor:
        y = self.layer_scale(y) if self.use_layer_scale else y
        return x + self.drop_path(y) if self.shortcut else y


class EdgeResidual(Residual):
    """k x k expansion conv-BN-act (carries the stride), 1x1 projection conv-BN."""

    def __init__(self, c_in: int, c_out: int, mid: int, k: int, stride: int, act: str, drop_path: float) -> None:
        super().__init__()
        self.conv_exp = ConvBnAct(c_in, mid, k, stride, act=act)
        self.conv_pwl = ConvBnAct(mid, c_out, 1)
        self._ending(c_in, c_out, stride, drop_path)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self._end(x, self.conv_pwl(self.conv_exp(x)))


class UniversalInvertedResidual(Residual):
    """[depthwise k_start conv-BN], 1x1 expansion conv-BN-act, [depthwise k_mid conv-BN-act, strided],
    1x1 projection conv-BN."""

    def __init__(self, c_in: int, c_out: int, mid: int, k_start: int, k_mid: int, stride: int, act: str,
                 drop_path: float, layer_scale: float) -> None:
        super().__init__()
        self.dw_start = ConvBnAct(c_in, c_in, k_start, groups=c_in) if k_start else nn.Identity()
        self.pw_exp = ConvBnAct(c_in, mid, 1, act=act)
        self.dw_mid = ConvBnAct(mid, mid, k_mid, stride, groups=mid, act=act) if k_mid else nn.Identity()
        self.pw_proj = ConvBnAct(mid, c_out, 1)
        self._ending(c_in, c_out, stride, drop_path, layer_scale)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self._end(x, self.pw_proj(self.dw_mid(self.pw_exp(self.dw_start(x)))))


class MobileAttention(Residual):
    """Multi-query attention over an NCHW map: `heads` query heads, one key/value head of kv_dim channels
    (keys and values optionally from a kv_stride-reduced map), scaled by 1/sqrt(heads * kv_dim) as in
    PaddleClas (not per head). Attention and output dropouts are PaddleClas's p=0 and left out."""

    def __init__(self, c_in: int, c_out: int, kv_dim: int, k: int, heads: int, kv_stride: int, drop_path: float,
                 layer_scale: float) -> None:
        super().__init__()
        self.heads, self.kv_dim, self.kv_stride = heads, kv_dim, kv_stride
        self.scale = (heads * kv_dim) ** -0.5
        self.norm = batch_norm(c_in)
        self.query_proj = nn.Conv2D(c_in, heads * kv_dim, 1, bias_attr=False)
        if kv_stride > 1:
            self.key_down_proj = ConvBnAct(c_in, c_in, k, kv_stride, groups=c_in)
            self.value_down_proj = ConvBnAct(c_in, c_in, k, kv_stride, groups=c_in)
        self.key_proj = nn.Conv2D(c_in, kv_dim, 1, bias_attr=False)
        self.value_proj = nn.Conv2D(c_in, kv_dim, 1, bias_attr=False)
        self.proj = nn.Conv2D(heads * kv_dim, c_out, 1, bias_attr=False)
        self._ending(c_in, c_out, 1, drop_path, layer_scale)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        y = self.norm(x)
        b, _, h, w = y.shape
        q = self.query_proj(y).reshape([b, self.heads, self.kv_dim, h * w]).transpose([0, 1, 3, 2])
        ky, vy = (self.key_down_proj(y), self.value_down_proj(y)) if self.kv_stride > 1 else (y, y)
        k = self.key_proj(ky).reshape([b, 1, self.kv_dim, -1])  # [B, 1, C, N']: one head, pre-transposed
        v = self.value_proj(vy).reshape([b, 1, self.kv_dim, -1]).transpose([0, 1, 3, 2])
        attn = nn.functional.softmax((q * self.scale) @ k, axis=-1)  # [B, heads, HW, N']
        out = (attn @ v).transpose([0, 1, 3, 2]).reshape([b, self.heads * self.kv_dim, h, w])
        return self._end(x, self.proj(out))


def make_block(spec: tuple, c_in: int, act: str, drop_path: float, layer_scale: float) -> nn.Layer:
    kind, c_out, *rest = spec
    if kind == "cn":
        k, stride = rest
        return ConvBnAct(c_in, c_out, k, stride, act=act, drop_path=drop_path)
    if kind == "er":
        mid, k, stride = rest
        return EdgeResidual(c_in, c_out, mid, k, stride, act, drop_path)
    if kind == "uir":
        mid, k_start, k_mid, stride = rest
        return UniversalInvertedResidual(c_in, c_out, mid, k_start, k_mid, stride, act, drop_path, layer_scale)
    kv_dim, k, heads, kv_stride = rest
    return MobileAttention(c_in, c_out, kv_dim, k, heads, kv_stride, drop_path, layer_scale)


class MobileNetV4(nn.Layer):
    def __init__(self, variant: str, num_classes: int = 1000, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        table, stem, act, layer_scale = VARIANTS[variant]
        self.conv_stem = ConvBnAct(3, stem, 3, 2, act=act)
        blocks, c_in = [], stem
        for i, spec in enumerate(table):
            blocks.append(make_block(spec, c_in, act, drop_path_rate * i / len(table), layer_scale))
            c_in = spec[1]
        self.blocks = nn.Sequential(*blocks)
        self.global_pool = nn.AdaptiveAvgPool2D(1)
        self.conv_head = ConvBnAct(c_in, HEAD, 1, act=act)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(HEAD, num_classes)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.conv_head(self.global_pool(self.blocks(self.conv_stem(x))))
        return self.classifier(self.flatten(x))


def mobilenet_v4(num_classes: int = 1000, input_size: int = 224, variant: str = "conv_small",
                 drop_path_rate: float = 0.0, drop_rate: float = 0.0) -> MobileNetV4:
    """Builder for MobileNetV4_conv_small/medium/large and _hybrid_medium/large. drop_rate is accepted as
    PaddleX's Arch passes it and ignored as PaddleClas does (see the module docstring). The hybrid nets'
    attention reshapes need sides that are multiples of 32."""
    if variant not in VARIANTS:
        raise ValueError(f"MobileNetV4 variant {variant!r} is not one of {sorted(VARIANTS)}")
    return MobileNetV4(variant, num_classes, drop_path_rate)

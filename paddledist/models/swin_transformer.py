"""Swin Transformer tiny/small/base/large (PaddleClas legendary_models.swin_transformer), parameter names
equal PaddleClas's.

A 4x4 stride-4 patch embedding + LayerNorm, four stages of blocks alternating plain and half-shifted window
attention (multi-head self-attention inside window x window token squares, plus a learned relative position
bias; shifted windows mask pairs that came from different image regions with -100), each followed by an MLP
(4x, GELU) and stochastic depth rising linearly to drop_path_rate; 2x2 patch merging between stages;
LayerNorm, mean over tokens, Linear head.

Like PaddleClas 2.6.0 (and unlike the original Swin) the window is never shrunk to the feature map: the last
stage at 224 px is one 7x7 window that the odd blocks still roll by 3 and mask. Sides not divisible by the
patch or window size are zero-padded at the bottom/right, as PaddleClas does.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.nn.initializer import Constant, TruncatedNormal

from paddledist.models.layers import DropPath, drop_path_rates

# size -> (embed_dim, depths, num_heads, PaddleClas's default drop_path_rate for the ImageNet-1k weights)
VARIANTS = {
    "tiny": (96, (2, 2, 6, 2), (3, 6, 12, 24), 0.2),
    "small": (96, (2, 2, 18, 2), (3, 6, 12, 24), 0.3),
    "base": (128, (2, 2, 18, 2), (4, 8, 16, 32), 0.5),
    "large": (192, (2, 2, 18, 2), (6, 12, 24, 48), 0.1),
}
MASKED = -100.0  # PaddleClas's (and the paper's) additive mask for token pairs across shifted regions


def pad_bottom_right(x: paddle.Tensor, multiple: int, channels_last: bool) -> paddle.Tensor:
    """Zero-pad H and W up to a multiple (only when needed, as PaddleClas skips the pad then)."""
    h, w = (x.shape[1], x.shape[2]) if channels_last else (x.shape[2], x.shape[3])
    ph, pw = (-h) % multiple, (-w) % multiple
    if ph == 0 and pw == 0:
        return x
    pads = [0, 0, 0, ph, 0, pw, 0, 0] if channels_last else [0, 0, 0, 0, 0, ph, 0, pw]
    return F.pad(x, pads)


def to_windows(x: paddle.Tensor, win: int) -> paddle.Tensor:
    """(B, H, W, C) -> (B * H/win * W/win, win*win, C), windows in row-major order per image."""
    b, h, w, c = x.shape
    x = x.reshape([b, h // win, win, w // win, win, c]).transpose([0, 1, 3, 2, 4, 5])
    return x.reshape([-1, win * win, c])


def from_windows(windows: paddle.Tensor, win: int, h: int, w: int) -> paddle.Tensor:
    c = windows.shape[-1]
    x = windows.reshape([-1, h // win, w // win, win, win, c]).transpose([0, 1, 3, 2, 4, 5])
    return x.reshape([-1, h, w, c])


def relative_position_index(win: int) -> np.ndarray:
    """For each (query, key) token pair in a window: the row of the bias table for their offset."""
    coords = np.stack(np.meshgrid(np.arange(win), np.arange(win), indexing="ij")).reshape(2, -1)
    offset = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (win - 1)
    return (offset[:, :, 0] * (2 * win - 1) + offset[:, :, 1]).astype("int64")


def shifted_window_mask(h: int, w: int, win: int, shift: int) -> np.ndarray:
    """(windows, win*win, win*win): 0 where both tokens come from the same region before the roll, else -100."""
    region = np.zeros([h, w], dtype="float32")
    bounds = ((0, -win), (-win, -shift), (-shift, None))
    for i, (h0, h1) in enumerate(bounds):
        for j, (w0, w1) in enumerate(bounds):
            region[slice(h0, h1), slice(w0, w1)] = i * 3 + j
    tiles = region.reshape(h // win, win, w // win, win).transpose(0, 2, 1, 3).reshape(-1, win * win)
    return np.where(tiles[:, None, :] != tiles[:, :, None], MASKED, 0.0).astype("float32")


class WindowAttention(nn.Layer):
    def __init__(self, dim: int, win: int, heads: int, qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0) -> None:
        super().__init__()
        self.win, self.heads, self.scale = win, heads, (dim // heads) ** -0.5
        self.relative_position_bias_table = self.create_parameter(
            [(2 * win - 1) ** 2, heads], default_initializer=TruncatedNormal(std=0.02))
        self.register_buffer("relative_position_index", paddle.to_tensor(relative_position_index(win)))
        self.qkv = nn.Linear(dim, dim * 3, bias_attr=None if qkv_bias else False)
        self.attn_drop, self.proj, self.proj_drop = nn.Dropout(attn_drop), nn.Linear(dim, dim), nn.Dropout(proj_drop)

    def position_bias(self) -> paddle.Tensor:
        n = self.win * self.win
        bias = paddle.index_select(self.relative_position_bias_table, self.relative_position_index.reshape([-1]))
        return bias.reshape([n, n, -1]).transpose([2, 0, 1]).unsqueeze(0)  # 1, heads, N, N

    def forward(self, x: paddle.Tensor, mask) -> paddle.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape([b, n, 3, self.heads, c // self.heads]).transpose([2, 0, 3, 1, 4])
        attn = paddle.matmul(q * self.scale, k, transpose_y=True) + self.position_bias()
        if mask is not None:
            windows = mask.shape[0]
            attn = attn.reshape([b // windows, windows, self.heads, n, n]) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.reshape([b, self.heads, n, n])
        attn = self.attn_drop(F.softmax(attn, axis=-1))
        out = paddle.matmul(attn, v).transpose([0, 2, 1, 3]).reshape([b, n, c])
        return self.proj_drop(self.proj(out))


class Mlp(nn.Layer):
    def __init__(self, dim: int, hidden: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1, self.act = nn.Linear(dim, hidden), nn.GELU()
        self.fc2, self.drop = nn.Linear(hidden, dim), nn.Dropout(drop)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class SwinBlock(nn.Layer):
    def __init__(self, dim: int, heads: int, win: int, shift: int, drop_path: float, mlp_ratio: float = 4.0,
                 drop: float = 0.0, attn_drop: float = 0.0) -> None:
        super().__init__()
        self.win, self.shift = win, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, win, heads, attn_drop=attn_drop, proj_drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)
        self._masks: dict = {}  # (padded H, W, dtype) -> mask; computed once in dygraph, not part of the state

    def mask(self, h: int, w: int, dtype) -> paddle.Tensor | None:
        if self.shift == 0:
            return None
        key = (h, w, str(dtype))
        if not paddle.in_dynamic_mode():  # tracing (export): a value of that program, which dygraph cannot use
            return paddle.to_tensor(shifted_window_mask(h, w, self.win, self.shift)).astype(dtype)
        if key not in self._masks:
            self._masks[key] = paddle.to_tensor(shifted_window_mask(h, w, self.win, self.shift)).astype(dtype)
        return self._masks[key]

    def attend(self, x: paddle.Tensor, h: int, w: int) -> paddle.Tensor:
        """Window attention over the (shifted) token grid, back in the input's token order."""
        b, _, c = x.shape
        grid = pad_bottom_right(x.reshape([b, h, w, c]), self.win, channels_last=True)
        hp, wp = grid.shape[1], grid.shape[2]
        if self.shift:
            grid = paddle.roll(grid, shifts=(-self.shift, -self.shift), axis=(1, 2))
        out = from_windows(self.attn(to_windows(grid, self.win), self.mask(hp, wp, x.dtype)), self.win, hp, wp)
        if self.shift:
            out = paddle.roll(out, shifts=(self.shift, self.shift), axis=(1, 2))
        if hp != h or wp != w:
            out = out[:, :h, :w, :]
        return out.reshape([b, h * w, c])

    def forward(self, x: paddle.Tensor, h: int, w: int) -> paddle.Tensor:
        x = x + self.drop_path(self.attend(self.norm1(x), h, w))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Layer):
    """2x2 neighbours concatenated (order: (0,0), (1,0), (0,1), (1,1)), LayerNorm, Linear 4C -> 2C."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias_attr=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: paddle.Tensor, h: int, w: int) -> paddle.Tensor:
        b, _, c = x.shape
        grid = pad_bottom_right(x.reshape([b, h, w, c]), 2, channels_last=True)
        parts = [grid[:, 0::2, 0::2], grid[:, 1::2, 0::2], grid[:, 0::2, 1::2], grid[:, 1::2, 1::2]]
        return self.reduction(self.norm(paddle.concat(parts, -1).reshape([b, -1, 4 * c])))


class Stage(nn.Layer):
    def __init__(self, dim: int, depth: int, heads: int, win: int, rates: list, downsample: bool) -> None:
        super().__init__()
        self.blocks = nn.LayerList([SwinBlock(dim, heads, win, 0 if i % 2 == 0 else win // 2, rates[i])
                                    for i in range(depth)])
        self.downsample = PatchMerging(dim) if downsample else None

    def forward(self, x: paddle.Tensor, h: int, w: int):
        for block in self.blocks:
            x = block(x, h, w)
        if self.downsample is not None:
            x, h, w = self.downsample(x, h, w), (h + 1) // 2, (w + 1) // 2
        return x, h, w


class PatchEmbed(nn.Layer):
    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2D(3, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: paddle.Tensor):
        x = self.proj(pad_bottom_right(x, self.patch, channels_last=False))
        h, w = x.shape[2], x.shape[3]
        return self.norm(x.flatten(2).transpose([0, 2, 1])), h, w


class SwinTransformer(nn.Layer):
    def __init__(self, embed_dim: int, depths, num_heads, window_size: int, num_classes: int = 1000,
                 drop_path_rate: float = 0.1, patch_size: int = 4) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(patch_size, embed_dim)
        self.pos_drop = nn.Dropout(0.0)
        rates = drop_path_rates(drop_path_rate, sum(depths))
        starts = [sum(depths[:i]) for i in range(len(depths))]
        self.layers = nn.LayerList([
            Stage(embed_dim * 2 ** i, depths[i], num_heads[i], window_size, rates[starts[i]:], i < len(depths) - 1)
            for i in range(len(depths))])
        features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = nn.LayerNorm(features)
        self.head = nn.Linear(features, num_classes)
        self.apply(_init_weights)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x, h, w = self.patch_embed(x)
        x = self.pos_drop(x)
        for stage in self.layers:
            x, h, w = stage(x, h, w)
        return self.head(self.norm(x).mean(1))


def _init_weights(m: nn.Layer) -> None:
    if isinstance(m, nn.Linear):
        TruncatedNormal(std=0.02)(m.weight)
        if m.bias is not None:
            Constant(0.0)(m.bias)
    elif isinstance(m, nn.LayerNorm):
        Constant(0.0)(m.bias)
        Constant(1.0)(m.weight)


def swin_transformer(num_classes: int = 1000, input_size: int = 224, size: str = "tiny", window_size: int = 7,
                     drop_path_rate: float | None = None) -> nn.Layer:
    """`input_size` is not needed to build (no absolute position embedding); the spec fixes it at 224/384."""
    embed_dim, depths, heads, default_rate = VARIANTS[size]
    rate = default_rate if drop_path_rate is None else drop_path_rate
    return SwinTransformer(embed_dim, depths, heads, window_size, num_classes=num_classes, drop_path_rate=rate)

"""CLIP ViT-B/16 and ViT-L/14 image encoders with a classifier (PaddleClas model_zoo.foundation_vit, the
CLIP_* builders), parameter names and shapes equal PaddleClas's.

Patch embedding, class token and position embeddings, CLIP's `ln_pre`, pre-norm transformer blocks, a final
LayerNorm on one token and a Linear head, computed the plain way (no fused GPU kernels). PaddleClas's quirks
kept because the official weights were tuned with them (which token classifies, padding to the patch, the
unused `proj`): docs/design_notes.md, "CLIP vision transformers"."""

from __future__ import annotations

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.nn.initializer import Constant, Normal, TruncatedNormal

from paddledist.models.layers import DropPath, drop_path_rates

# patch, embed_dim, depth, heads, classify from the first patch token (True) or the class token (False)
VARIANTS = {"base_patch16": (16, 768, 12, 12, True), "large_patch14": (14, 1024, 24, 16, False)}


class PatchEmbed(nn.Layer):
    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2D(3, dim, patch, stride=patch, bias_attr=False)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        h, w = x.shape[2], x.shape[3]
        if h % self.patch or w % self.patch:
            x = F.pad(x, [0, 0, 0, 0, 0, self.patch - h % self.patch, 0, self.patch - w % self.patch])
        x = self.proj(x)
        grid = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose([0, 2, 1]), grid


class Attention(nn.Layer):
    def __init__(self, dim: int, heads: int, attn_drop: float, proj_drop: float) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        n, c = x.shape[1], x.shape[2]
        qkv = self.qkv(x).reshape([-1, n, 3, self.heads, c // self.heads]).transpose([2, 0, 3, 1, 4])
        q, k, v = qkv[0], qkv[1], qkv[2]
        weights = F.softmax(q.matmul(k, transpose_y=True) * self.scale, axis=-1)
        out = self.attn_drop(weights).matmul(v).transpose([0, 2, 1, 3]).reshape([-1, n, c])
        return self.proj_drop(self.proj(out))


class Mlp(nn.Layer):
    def __init__(self, dim: int, hidden: int, drop: float) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Layer):
    def __init__(self, dim: int, heads: int, mlp_ratio: float, drop: float, attn_drop: float,
                 path_drop: float, epsilon: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, epsilon=epsilon)
        self.attn = Attention(dim, heads, attn_drop, drop)
        self.drop_path = DropPath(path_drop) if path_drop > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, epsilon=epsilon)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class Head(nn.Layer):
    """A wrapper only so the Linear is named `head.fc_head` as in PaddleClas."""

    def __init__(self, dim: int, num_classes: int, scale: float) -> None:
        super().__init__()
        # PaddleClas multiplies a std-0.02 init by head_init_scale; drawing at std 0.02*scale is the same law
        # and, unlike set_value, works under paddle.LazyGuard.
        self.fc_head = nn.Linear(dim, num_classes, weight_attr=nn.initializer.TruncatedNormal(std=0.02 * scale),
                                 bias_attr=nn.initializer.Constant(0.0))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.fc_head(x)


class CLIPVisionTransformer(nn.Layer):
    def __init__(self, patch_size: int, embed_dim: int, depth: int, num_heads: int, first_patch: bool,
                 num_classes: int = 1000, img_size: int = 224, mlp_ratio: float = 4.0, drop_rate: float = 0.0,
                 attn_drop_rate: float = 0.0, drop_path_rate: float = 0.0, epsilon: float = 1e-5,
                 output_dim: int = 512, head_init_scale: float = 0.001) -> None:
        super().__init__()
        self.grid = (img_size // patch_size, img_size // patch_size)
        self.first_patch = first_patch
        self.patch_embed = PatchEmbed(patch_size, embed_dim)
        trunc = TruncatedNormal(std=0.02)
        self.pos_embed = self.create_parameter([1, self.grid[0] * self.grid[1] + 1, embed_dim],
                                               default_initializer=trunc)
        self.cls_token = self.create_parameter([1, 1, embed_dim], default_initializer=trunc)
        self.pos_drop = nn.Dropout(drop_rate)
        self.ln_pre = nn.LayerNorm(embed_dim)
        # Unused by the classifier (see the module docstring); PaddleClas draws it as randn / sqrt(embed_dim).
        self.proj = self.create_parameter([embed_dim, output_dim], default_initializer=Normal(std=embed_dim ** -0.5))
        rates = drop_path_rates(drop_path_rate, depth)
        self.blocks = nn.LayerList([Block(embed_dim, num_heads, mlp_ratio, drop_rate, attn_drop_rate, rates[i], epsilon)
                                    for i in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, epsilon=epsilon)
        self.blocks.apply(_init_linear)
        self.head = Head(embed_dim, num_classes, head_init_scale)

    def get_num_layers(self) -> int:
        """The L of AdamWDL's layer-wise lr decay (PaddleClas's method name)."""
        return len(self.blocks)

    def no_weight_decay(self) -> set:
        """Names AdamWDL's filter_bias_and_bn exempts from weight decay (PaddleClas's method name)."""
        return {"pos_embed", "cls_token"}

    def _position(self, grid: tuple) -> paddle.Tensor:
        if grid == self.grid:
            return self.pos_embed
        cls_pos, patches = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        patches = patches.reshape([-1, self.grid[0], self.grid[1], patches.shape[-1]]).transpose([0, 3, 1, 2])
        patches = F.interpolate(patches, size=list(grid), mode="bicubic", align_corners=False)
        return paddle.concat([cls_pos, patches.flatten(2).transpose([0, 2, 1])], axis=1)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x, grid = self.patch_embed(x)
        x = paddle.concat([self.cls_token.expand([x.shape[0], -1, -1]), x], axis=1) + self._position(grid)
        x = self.pos_drop(self.ln_pre(x))
        for block in self.blocks:
            x = block(x)
        token = x[:, 1] if self.first_patch else x[:, 0]
        return self.head(self.norm(token))


def _init_linear(m: nn.Layer) -> None:
    if isinstance(m, nn.Linear):
        TruncatedNormal(std=0.02)(m.weight)
        if m.bias is not None:
            Constant(0.0)(m.bias)


def clip_vit(num_classes: int = 1000, input_size: int = 224, variant: str = "base_patch16",
             use_fused_attn: bool = False, use_fused_linear: bool = False, **kwargs) -> nn.Layer:
    """`use_fused_*` are accepted for PaddleX's Arch keys; they choose kernels, not the function.
    `input_size` does not change the network: PaddleClas's CLIP_* builders fix img_size=224 (the position
    embeddings' shape in the weight files) and resize the embeddings at run time for other inputs."""
    patch, dim, depth, heads, first_patch = VARIANTS[variant]
    kwargs.setdefault("depth", depth)  # a shallower net of the same class, for tests
    return CLIPVisionTransformer(patch, dim, num_heads=heads, first_patch=first_patch,
                                 num_classes=num_classes, **kwargs)

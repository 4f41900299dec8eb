"""The model registry: every model name, its family, how to build it, and its `pretrained_cfg`.

timm's shape: one architecture file per family (`paddledist/models/<family>.py`) and one explicit table.
The tables live in `paddledist/models/specs/<family>.py` (plain data, no paddle), so the launching process
checks `Global.model`, reads input sizes and optimizer defaults, and resolves weight URLs without importing
paddle (importing paddle there cost ~1.3 s of every job's start-up).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PADDLEX_WEIGHTS = "https://paddle-model-ecology.bj.bcebos.com/paddlex/official_pretrained_model"


@dataclass(frozen=True)
class OptimizerCfg:
    """The optimizer and schedule PaddleX's training config for the model uses (its `Optimizer:` section)."""

    name: str = "Momentum"
    """Momentum, AdamW or AdamWDL (AdamW with layer-wise lr decay, PaddleClas's)."""
    momentum: float = 0.9
    """Momentum only."""
    weight_decay: float = 1e-4
    """Momentum: the L2 regularizer's coeff; AdamW: the decoupled weight_decay."""
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    no_weight_decay_name: tuple = ()
    """AdamW: parameters whose name contains one of these get no decay (PaddleX's no_weight_decay_name)."""
    one_dim_param_no_weight_decay: bool = False
    """AdamW: 1-D parameters (norms, biases) get no decay."""
    clip_grad_norm: Optional[float] = None
    """Global-norm gradient clipping, when PaddleX's config sets it."""
    learning_rate: float = 0.1
    """PaddleX's base learning rate for the model (Train.learning_rate in a PaddleX config wins)."""
    warmup_epochs: int = 5
    """PaddleX's warm-up epochs (Train.warmup_steps in a PaddleX config wins)."""
    layerwise_decay: Optional[float] = None
    """AdamWDL (PaddleX's layerwise_decay): the lr of `blocks.<i>.*` is scaled by decay**(L - i) and of names
    containing "embed" by decay**(L + 1), L = the model's get_num_layers(); None: no layer-wise decay."""
    filter_bias_and_bn: bool = False
    """AdamWDL (PaddleX's filter_bias_and_bn): 1-D parameters (biases, norm weights) and the names in the
    model's no_weight_decay() get no weight decay."""
    schedule: str = "cosine"
    """The learning-rate schedule after warm-up: cosine (to 0 at the last epoch) or piecewise (x0.1 at each of
    decay_epochs, PaddleClas's Piecewise for the plain ResNets)."""
    decay_epochs: tuple = (30, 60, 90)
    """piecewise only: the epochs after which the rate drops tenfold."""


@dataclass(frozen=True)
class PretrainedCfg:
    """What the data pipeline, the weight loader and the optimizer read for one model (timm's pretrained_cfg)."""

    url: Optional[str] = None
    """Official PaddleX pretrained weights (`Train.pretrain_weight_path: default`); None: there are none."""
    input_size: int = 224
    """Training crop and eval crop side (the width, for a model with input_height)."""
    input_height: Optional[int] = None
    """Models fed non-square images (text-line orientation: 80 x 160): their height; images are resized to
    input_height x input_size for training and evaluation, without a crop (PaddleX's ResizeImage size [W, H])."""
    resize_short: int = 256
    """Eval: the short side is resized to this, then centre-cropped to input_size."""
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    interpolation: str = "bilinear"
    num_classes: int = 1000
    """Classes of the official weights (their head)."""
    min_input_size: int = 32
    """Smallest input side the architecture accepts (its total stride, or input_size when fixed)."""
    fixed_input_size: bool = False
    """True where the network only runs at input_size (position embeddings, attention windows)."""
    train_crop: str = "random_resized_crop"
    """Training augmentation: random_resized_crop (+ horizontal flip, PaddleClas's RandCropImage and
    RandFlipImage for ImageNet models), pad_crop (resize, pad by 1/8 and random crop: small images) or resize
    (resize only: PaddleX's text-line models add TimmAutoAugment and RandomErasing, which paddledist has not)."""
    optimizer: OptimizerCfg = field(default_factory=OptimizerCfg)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    """The PaddleX model name (Global.model)."""
    family: str
    """The architecture module: paddledist.models.<family>."""
    builder: str
    """The function in that module: builder(num_classes=..., input_size=..., **kwargs) -> paddle.nn.Layer."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    cfg: PretrainedCfg = field(default_factory=PretrainedCfg)
    paddleclas_name: Optional[str] = None
    """The PaddleClas architecture this network equals (Arch.name in PaddleX's training config)."""
    classifier: tuple = ("fc",)
    """The classifier head's parameter-name prefixes (timm's `classifier`): on fine-tuning with another class
    count these tensors are replaced (kept freshly initialised); every other tensor must fit."""


def paddlex_url(name: str) -> str:
    """PaddleX's official pretrained-weight URL for a model name."""
    return f"{PADDLEX_WEIGHTS}/{name}_pretrained.pdparams"


# The families, in the order the docs' model table lists them. Each names paddledist/models/specs/<family>.py
# (its SPECS) and paddledist/models/<family>.py (the architecture).
FAMILIES = (
    "lenet",
    "pp_lcnet",
    "pp_lcnet_v2",
    "pp_hgnet",
    "pp_hgnet_v2",
    "resnet",
    "mobilenet_v1",
    "mobilenet_v2",
    "mobilenet_v3",
    "mobilenet_v4",
    "convnext",
    "swin_transformer",
    "vision_transformer",
    "starnet",
    "fasternet",
)


def _collect() -> dict[str, ModelSpec]:
    table: dict[str, ModelSpec] = {}
    for family in FAMILIES:
        for spec in importlib.import_module(f"paddledist.models.specs.{family}").SPECS:
            if spec.name in table:
                raise RuntimeError(f"model {spec.name!r} is registered twice")
            table[spec.name] = spec
    return table


REGISTRY: dict[str, ModelSpec] = _collect()

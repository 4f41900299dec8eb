"""How a model is trained and fed: its pretrained_cfg, with the Train keys the user set winning (no paddle).

`recipe(cfg)` is the one place that decides input size, eval resize, mean/std, augmentation, the optimizer
and its schedule; the stages and the export read it instead of the config, so a null key means "as PaddleX
trains this model" everywhere at once. It is a runtime value, never written back into the config.
"""

from __future__ import annotations

from dataclasses import dataclass

from paddledist.config import Config
from paddledist.errors import UserError
from paddledist.models import model_spec

FAR_BELOW = 4
"""A model trained at less than 1/FAR_BELOW of its design side warns once (e.g. ResNet50 at 32 px of 224)."""


@dataclass(frozen=True)
class Recipe:
    input_size: int
    """The side of square inputs; the width of non-square ones."""
    input_height: int
    """== input_size for square inputs; otherwise the images are resized to input_height x input_size, no crop."""
    resize_short: int
    """Eval: short side resized to this, then centre-cropped to input_size (equal: resized to a square)."""
    interpolation: str
    mean: tuple
    std: tuple
    train_crop: str
    optimizer: str
    learning_rate: float
    schedule: str
    decay_epochs: tuple
    warmup_epochs: int
    momentum: float
    weight_decay: float
    no_weight_decay_name: tuple
    one_dim_param_no_weight_decay: bool
    clip_grad_norm: float
    """0: no clipping."""
    design_size: int
    layerwise_decay: float | None = None
    """AdamWDL: the lr of `blocks.<i>.*` x decay**(L - i), of other names holding "embed" x decay**(L + 1)."""
    filter_bias_and_bn: bool = False
    """AdamWDL: 1-D parameters and the model's no_weight_decay() names get no weight decay."""

    def summary(self) -> str:
        """One line for the start of training: what was chosen."""
        opt = (f"Momentum(momentum={self.momentum}, L2={self.weight_decay})" if self.optimizer == "Momentum" else
               f"AdamW(weight_decay={self.weight_decay}, no_weight_decay_name={list(self.no_weight_decay_name)}, "
               f"one_dim_param_no_weight_decay={self.one_dim_param_no_weight_decay})")
        clip = f", clip_grad_norm={self.clip_grad_norm}" if self.clip_grad_norm else ""
        sched = self.schedule + (f"(decay_epochs={list(self.decay_epochs)})" if self.schedule == "piecewise" else "")
        shape = (f"input {self.input_height}x{self.input_size} px (height x width, resized, no crop)"
                 if self.rectangular else
                 f"input {self.input_size} px (eval: resize short side {self.resize_short}, centre crop)")
        return (f"{shape}, {self.interpolation}, train crop {self.train_crop}; {opt}{clip}, lr {self.learning_rate} "
                f"{sched} with {self.warmup_epochs} warm-up epoch(s)")

    @property
    def rectangular(self) -> bool:
        return self.input_height != self.input_size

    def size_warning(self, model: str) -> str | None:
        if self.input_size * FAR_BELOW <= self.design_size:
            return (f"paddledist: warning: {model} is designed for {self.design_size} px inputs and is trained at "
                    f"{self.input_size} px (Train.input_size); accuracy and the pretrained weights' use suffer "
                    f"far below the design size; leave Train.input_size null for {self.design_size}")
        return None


def _input_size(cfg: Config, pre) -> int:
    size = cfg.Train.input_size
    if size is None:
        return pre.input_size
    if pre.fixed_input_size and size != pre.input_size:
        raise UserError(f"Train.input_size={size}: {cfg.Global.model} runs at {pre.input_size} px only "
                        f"(fixed by its architecture); set -o Train.input_size={pre.input_size} or null")
    if size < pre.min_input_size:
        raise UserError(f"Train.input_size={size} is below {cfg.Global.model}'s smallest input of "
                        f"{pre.min_input_size} px; set -o Train.input_size={pre.min_input_size} or more")
    return size


def recipe(cfg: Config) -> Recipe:
    t, pre = cfg.Train, model_spec(cfg.Global.model).cfg
    opt = pre.optimizer
    size = _input_size(cfg, pre)
    name = t.optimizer or opt.name
    own = name == opt.name  # the model's AdamW/Momentum details apply only to its own optimizer
    clip = opt.clip_grad_norm or 0.0 if t.clip_grad_norm is None else t.clip_grad_norm
    return Recipe(
        input_size=size,
        input_height=size if pre.input_height is None else round(size * pre.input_height / pre.input_size),
        resize_short=max(size, round(size * pre.resize_short / pre.input_size)),
        interpolation=pre.interpolation, mean=tuple(pre.mean), std=tuple(pre.std), train_crop=pre.train_crop,
        optimizer=name, learning_rate=t.learning_rate, schedule=t.lr_scheduler or opt.schedule,
        decay_epochs=tuple(opt.decay_epochs), warmup_epochs=t.warmup_steps,
        momentum=opt.momentum if t.momentum is None else t.momentum,
        weight_decay=(opt.weight_decay if own else _DEFAULT_DECAY[name]) if t.weight_decay is None else t.weight_decay,
        no_weight_decay_name=tuple(opt.no_weight_decay_name) if own else (),
        one_dim_param_no_weight_decay=opt.one_dim_param_no_weight_decay if own else False,
        clip_grad_norm=clip, design_size=pre.input_size,
        layerwise_decay=opt.layerwise_decay if own else None, filter_bias_and_bn=opt.filter_bias_and_bn and own)


_DEFAULT_DECAY = {"Momentum": 1e-4, "AdamW": 0.05, "AdamWDL": 0.05}
"""Weight decay when Train.optimizer picks an optimizer other than the model's own and weight_decay is null."""

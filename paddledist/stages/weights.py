"""Weight files for every stage: where a weight key points (path, URL, `default`), reading, and fitting.

`source` turns a key's value into a local file (downloading a URL once per machine through paddledist.hub);
`fit_pretrained` decides, by name, what of a PaddleClas/PaddleX/paddledist state dict loads into a model;
`read`/`build` serve evaluate and export (Evaluate/Export.weight_path, or the train stage's best model).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from paddledist import hub
from paddledist.config import Config
from paddledist.engine import checkpoint
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError
from paddledist.stages.common import best_weights


def source(value: Optional[str], key: str, model: str, dry_run: bool = False) -> Optional[str]:
    """The local file for a weight key: null -> None; `default` -> the model's official pretrained URL; a URL ->
    its cached download (nothing is downloaded in a dry run: the path it would have); a path as it is."""
    if not value:
        return None
    if value.strip().lower() == "default":
        from paddledist.models import model_spec

        url = model_spec(model).cfg.url
        if not url:
            raise UserError(f"{key}=default: Global.model={model} has no official pretrained weights; set a "
                            ".pdparams path or an http(s) URL, or null")
        value = url
    return hub.resolve(value, key, dry_run=dry_run)


def pending(path: Optional[str], dry_run: bool) -> bool:
    """True in a dry run for a URL that is not downloaded yet: there is nothing to read or check."""
    return bool(dry_run and path and not os.path.exists(path))


@dataclass
class Fit:
    """What loading a state dict into a model does, tensor by tensor."""
    loaded: list = field(default_factory=list)
    replaced: list = field(default_factory=list)
    """Classifier-head tensors of another shape (another class count) or absent: kept as initialised."""
    ignored: list = field(default_factory=list)
    """Tensors of the file the model does not have."""

    def summary(self, path: str) -> str:
        rep = ", ".join(self.replaced) or "none"
        ign = ", ".join(self.ignored) or "none"
        return (f"paddledist: pretrained {path}: loaded {len(self.loaded)} tensor(s) by name; replaced "
                f"(classifier head, other class count): {rep}; ignored (not in the model): {ign}")


def _shape(value) -> list:
    return [int(d) for d in value.shape]


def fit_pretrained(own: dict, params: dict, classifier: tuple, key: str, path: str) -> Fit:
    """Match `params` to the model's state dict `own` (name -> tensor or shape) by name. Head tensors (names under
    a `classifier` prefix) of another shape are replaced; any other missing or misshapen tensor is an error."""
    def in_head(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in classifier)

    fit = Fit(ignored=[k for k in params if k not in own])
    for name, value in own.items():
        mine = list(value) if isinstance(value, (list, tuple)) else _shape(value)
        if name in params and _shape(params[name]) == mine:
            fit.loaded.append(name)
        elif in_head(name):
            fit.replaced.append(f"{name} {_shape(params[name]) if name in params else 'absent'} -> {mine}")
        else:
            got = f"shape {_shape(params[name])}, the model's {mine}" if name in params else "missing"
            raise UserError(f"{key}: {path} does not fit Global.model: tensor {name} is {got}; use weights of "
                            "the same model (only the classifier head may differ, for another class count)")
    return fit


def resolve(cfg: Config, section: str, dry_run: bool = False) -> tuple[str, str]:
    """(local path, key): `<section>.weight_path` resolved by `source`, or the train stage's best model."""
    key = f"{section}.weight_path"
    value = getattr(cfg, section).weight_path
    return (source(value, key, cfg.Global.model, dry_run), key) if value else (best_weights(cfg), key)


def read(cfg: Config, section: str, dist: DistEnv, dry_run: bool = False) -> Optional[dict]:
    """The parameters on rank 0 (None elsewhere: the file may exist on the first machine only)."""
    if not dist.is_main:
        return None
    path, key = resolve(cfg, section, dry_run)
    if pending(path, dry_run):
        return None
    if not os.path.isfile(path):
        how = (f"set -o {key}=PATH.pdparams" if getattr(cfg, section).weight_path
               else f"{key} is unset, so the train stage's best model is used: train first (Global.mode=train) "
                    f"with this Global.output or set -o {key}=PATH.pdparams")
        raise UserError(f"{key}: file not found: {path}; {how}")
    return checkpoint.load(path, key).params


def build(cfg: Config, params: dict, section: str):
    """The model of Global.model with `params`, in eval mode; weights of another shape are an error."""
    from paddledist.models import build_model
    from paddledist.models.recipe import recipe

    path, key = resolve(cfg, section)
    size = recipe(cfg).input_size
    model = build_model(cfg.Global.model, cfg.Train.num_classes, size)
    own = model.state_dict()
    missing = [k for k in own if k not in params]
    misfit = [f"{k} {list(params[k].shape)} vs {list(own[k].shape)}" for k in own
              if k in params and list(params[k].shape) != list(own[k].shape)]
    if missing or misfit:
        bad = (missing + misfit)[:3]
        raise UserError(f"{key}: {path} does not fit Global.model={cfg.Global.model} with Train.num_classes="
                        f"{cfg.Train.num_classes}, input size {size} (missing or wrong shape: "
                        f"{'; '.join(bad)}); use the same model settings as in training")
    model.set_state_dict({k: params[k] for k in own})
    model.eval()
    return model

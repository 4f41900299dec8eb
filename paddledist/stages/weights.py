"""Weights for evaluate and export: which file (the key or the train stage's best model), read, and fitted."""

from __future__ import annotations

import os
from typing import Optional

from paddledist.config import Config
from paddledist.engine import checkpoint
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError
from paddledist.stages.common import best_weights


def resolve(cfg: Config, section: str) -> tuple[str, str]:
    """(path, key): `<section>.weight_path`, or the train stage's best model when it is unset."""
    key = f"{section}.weight_path"
    path = getattr(cfg, section).weight_path
    return (path, key) if path else (best_weights(cfg), key)


def read(cfg: Config, section: str, dist: DistEnv) -> Optional[dict]:
    """The parameters on rank 0 (None elsewhere: the file may exist on the first machine only)."""
    path, key = resolve(cfg, section)
    if not dist.is_main:
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

    path, key = resolve(cfg, section)
    model = build_model(cfg.Global.model, cfg.Train.num_classes, cfg.Train.input_size)
    own = model.state_dict()
    missing = [k for k in own if k not in params]
    misfit = [f"{k} {list(params[k].shape)} vs {list(own[k].shape)}" for k in own
              if k in params and list(params[k].shape) != list(own[k].shape)]
    if missing or misfit:
        bad = (missing + misfit)[:3]
        raise UserError(f"{key}: {path} does not fit Global.model={cfg.Global.model} with Train.num_classes="
                        f"{cfg.Train.num_classes}, Train.input_size={cfg.Train.input_size} (missing or wrong shape: "
                        f"{'; '.join(bad)}); use the same model settings as in training")
    model.set_state_dict({k: params[k] for k in own})
    model.eval()
    return model

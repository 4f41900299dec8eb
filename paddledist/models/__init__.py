"""Models by PaddleX name: `check_model_name`, `model_spec`, `build_model`.

Importing this module does not import paddle: the launching process checks Global.model by name only.
The architectures are imported when a model is built."""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING

from paddledist.errors import UserError
from paddledist.models.registry import REGISTRY, ModelSpec, PretrainedCfg

if TYPE_CHECKING:
    import paddle.nn as nn

__all__ = ["REGISTRY", "ModelSpec", "PretrainedCfg", "build_model", "check_model_name", "model_spec"]


def check_model_name(name: str) -> None:
    if name not in REGISTRY:
        near = difflib.get_close_matches(name, list(REGISTRY), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise UserError(f"Global.model: unknown model {name!r}; {hint}known: {', '.join(REGISTRY)}")


def model_spec(name: str) -> ModelSpec:
    check_model_name(name)
    return REGISTRY[name]


def build_model(name: str, num_classes: int, input_size: int) -> nn.Layer:
    spec = model_spec(name)
    builder = getattr(importlib.import_module(f"paddledist.models.{spec.family}"), spec.builder)
    return builder(num_classes=num_classes, input_size=input_size, **spec.kwargs)

"""Model registry: PaddleX names over paddle.vision.models, plus our LeNet."""

from __future__ import annotations

from typing import Callable

import paddle.nn as nn
import paddle.vision.models as pvm

from paddledist.errors import UserError
from paddledist.models.lenet import LeNet

# name -> builder(num_classes, input_size)
REGISTRY: dict[str, Callable[[int, int], nn.Layer]] = {
    "LeNet": lambda classes, size: LeNet(classes, size),
    "ResNet18": lambda classes, size: pvm.resnet18(num_classes=classes),
    "ResNet34": lambda classes, size: pvm.resnet34(num_classes=classes),
    "ResNet50": lambda classes, size: pvm.resnet50(num_classes=classes),
    "ResNet101": lambda classes, size: pvm.resnet101(num_classes=classes),
    "MobileNetV2": lambda classes, size: pvm.mobilenet_v2(num_classes=classes),
    "MobileNetV3_small_x1_0": lambda classes, size: pvm.mobilenet_v3_small(num_classes=classes),
    "MobileNetV3_large_x1_0": lambda classes, size: pvm.mobilenet_v3_large(num_classes=classes),
}


def check_model_name(name: str) -> None:
    if name not in REGISTRY:
        raise UserError(f"Global.model: unknown model {name!r}; known: {', '.join(REGISTRY)}")


def build_model(name: str, num_classes: int, input_size: int) -> nn.Layer:
    check_model_name(name)
    return REGISTRY[name](num_classes, input_size)

"""Model registry: PaddleX names over paddle.vision.models, plus our LeNet.

Importing this module does not import paddle: the launching process checks Global.model by name only
(importing paddle there cost ~1.3 s of every job's start-up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paddledist.errors import UserError

if TYPE_CHECKING:
    import paddle.nn as nn

# name -> the paddle.vision.models builder (None: our LeNet)
REGISTRY: dict[str, str | None] = {
    "LeNet": None,
    "ResNet18": "resnet18",
    "ResNet34": "resnet34",
    "ResNet50": "resnet50",
    "ResNet101": "resnet101",
    "MobileNetV2": "mobilenet_v2",
    "MobileNetV3_small_x1_0": "mobilenet_v3_small",
    "MobileNetV3_large_x1_0": "mobilenet_v3_large",
}


def check_model_name(name: str) -> None:
    if name not in REGISTRY:
        raise UserError(f"Global.model: unknown model {name!r}; known: {', '.join(REGISTRY)}")


def build_model(name: str, num_classes: int, input_size: int) -> nn.Layer:
    check_model_name(name)
    if REGISTRY[name] is None:
        from paddledist.models.lenet import LeNet

        return LeNet(num_classes, input_size)
    import paddle.vision.models as pvm

    return getattr(pvm, REGISTRY[name])(num_classes=num_classes)

"""MobileNetV2_x0_25 ... x2_0 (PaddleClas model_zoo.mobilenet_v2), with PaddleX's values.

From PaddleX's training configs: Momentum 0.9, cosine schedule without warm-up, base learning rate 0.045,
L2 3e-5 (x0_25, x0_5) or 4e-5; train crop 224, eval resize 256 / crop 224. PaddleX's MobileNetV2_x1_0 is
PaddleClas's `MobileNetV2`.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(width: str, scale: float, weight_decay: float) -> ModelSpec:
    name = f"MobileNetV2_{width}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=256, min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=weight_decay,
                                               learning_rate=0.045, warmup_epochs=0))
    return ModelSpec(name, "mobilenet_v2", "mobilenet_v2", kwargs={"scale": scale}, cfg=cfg,
                     paddleclas_name="MobileNetV2" if width == "x1_0" else name)


SPECS = (
    _spec("x0_25", 0.25, 3e-5),
    _spec("x0_5", 0.5, 3e-5),
    _spec("x1_0", 1.0, 4e-5),
    _spec("x1_5", 1.5, 4e-5),
    _spec("x2_0", 2.0, 4e-5),
)

"""MobileNetV1_x0_25..x1_0 (PaddleClas legendary_models.mobilenet_v1), with PaddleX's values.

PaddleX's training configs: Momentum 0.9, L2 3e-5, base lr 0.1 on a *Piecewise* schedule (x0.1 at epochs
30, 60, 90, no warm-up); eval resize-short 256, crop 224. OptimizerCfg has no schedule field yet, so the
registry records lr 0.1 and 0 warm-up epochs; the step schedule itself is not expressed here.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(width: str, scale: float) -> ModelSpec:
    name = "MobileNetV1_x" + width
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=256, min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=3e-5,
                                               learning_rate=0.1, warmup_epochs=0))
    # PaddleX's MobileNetV1_x1_0 config names PaddleClas's architecture plain "MobileNetV1"
    return ModelSpec(name, "mobilenet_v1", "mobilenet_v1", kwargs={"scale": scale}, cfg=cfg,
                     paddleclas_name="MobileNetV1" if width == "1_0" else name)


SPECS = (_spec("0_25", 0.25), _spec("0_5", 0.5), _spec("0_75", 0.75), _spec("1_0", 1.0))

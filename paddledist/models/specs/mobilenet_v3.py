"""MobileNetV3_large/_small x0_35..x1_25 (PaddleClas legendary_models.mobilenet_v3), with PaddleX's values.

PaddleX's training configs: Momentum 0.9, cosine with 5 warm-up epochs, base lr 1.3 (large x1_0: 0.65,
small x1_0: 0.13), L2 2e-5 (large x1_25: 4e-5; small x0_35, x0_5: 1e-5); eval resize-short 256, crop 224.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(size: str, width: str, lr: float, l2: float) -> ModelSpec:
    name = f"MobileNetV3_{size}_x{width}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=256, min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=l2,
                                               learning_rate=lr, warmup_epochs=5))
    return ModelSpec(name, "mobilenet_v3", "mobilenet_v3",
                     kwargs={"size": size, "scale": float(width.replace("_", "."))}, cfg=cfg, paddleclas_name=name)


SPECS = (
    _spec("large", "0_35", 1.3, 2e-5), _spec("large", "0_5", 1.3, 2e-5), _spec("large", "0_75", 1.3, 2e-5),
    _spec("large", "1_0", 0.65, 2e-5), _spec("large", "1_25", 1.3, 4e-5),
    _spec("small", "0_35", 1.3, 1e-5), _spec("small", "0_5", 1.3, 1e-5), _spec("small", "0_75", 1.3, 2e-5),
    _spec("small", "1_0", 0.13, 2e-5), _spec("small", "1_25", 1.3, 2e-5),
)

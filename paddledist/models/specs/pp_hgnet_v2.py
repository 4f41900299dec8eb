"""PP-HGNetV2-B0 ... B6 (PaddleClas legendary_models.pp_hgnet_v2), with PaddleX's values.

From PaddleX's training configs (Arch sets only class_num and pretrained): Momentum 0.9, L2 2e-5, cosine
schedule, base learning rate 0.5 with 5 warm-up epochs; eval bicubic resize to 232, crop 224.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(variant: str) -> ModelSpec:
    name = f"PP-HGNetV2-{variant}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=232, interpolation="bicubic",
                        min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=2e-5,
                                               learning_rate=0.5, warmup_epochs=5))
    return ModelSpec(name, "pp_hgnet_v2", "pp_hgnet_v2", kwargs={"variant": variant}, cfg=cfg,
                     paddleclas_name=f"PPHGNetV2_{variant}")


SPECS = tuple(_spec(f"B{i}") for i in range(7))

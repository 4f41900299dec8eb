"""PP-LCNetV2_small/_base/_large (PaddleClas legendary_models.pp_lcnet_v2), with PaddleX's values.

PaddleX's training configs: Momentum 0.9, cosine with 5 warm-up epochs; base lr 0.8 (_large 0.4), L2 2e-5
(_small) or 4e-5; eval resize-short 256, crop 224.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(size: str, lr: float, l2: float) -> ModelSpec:
    name = "PP-LCNetV2_" + size
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=256, min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=l2,
                                               learning_rate=lr, warmup_epochs=5))
    return ModelSpec(name, "pp_lcnet_v2", "pp_lcnet_v2", kwargs={"size": size}, cfg=cfg,
                     paddleclas_name="PPLCNetV2_" + size)


SPECS = (_spec("small", 0.8, 2e-5), _spec("base", 0.8, 4e-5), _spec("large", 0.4, 4e-5))

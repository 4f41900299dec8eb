"""PP-HGNet_tiny/_small/_base (PaddleClas legendary_models.pp_hgnet), with PaddleX's values.

From PaddleX's training configs: Momentum 0.9, L2 4e-5, cosine schedule with 5 warm-up epochs, base learning
rate 0.5 (_small: 0.25); eval bicubic resize to 232 (_small, _base: 236), crop 224.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(name: str, size: str, learning_rate: float, resize_short: int) -> ModelSpec:
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=resize_short, interpolation="bicubic",
                        min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=4e-5,
                                               learning_rate=learning_rate, warmup_epochs=5))
    return ModelSpec(name, "pp_hgnet", "pp_hgnet", kwargs={"size": size}, cfg=cfg,
                     paddleclas_name="PPHGNet_" + size)


SPECS = (
    _spec("PP-HGNet_tiny", "tiny", 0.5, 232),
    _spec("PP-HGNet_small", "small", 0.25, 236),
    _spec("PP-HGNet_base", "base", 0.5, 236),
)

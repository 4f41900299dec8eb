"""FasterNet-T0/T1/T2/S/M/L (PaddleClas model_zoo.fasternet), with PaddleX's values.

From PaddleX's training configs: AdamW (0.9, 0.999, eps 1e-8) with 1-D parameters exempt from decay, weight
decay 0.005 / 0.01 / 0.02 / 0.03 / 0.05 / 0.05, gradient clipping only for M (global norm 1) and L (0.01),
cosine schedule from 6e-4 with 20 warm-up epochs; train crop 224, eval bicubic resize 248 / crop 224.
Stochastic depth comes from PaddleClas's per-variant table (PaddleX's Arch does not set it).
"""

from typing import Optional

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(variant: str, weight_decay: float, clip_grad_norm: Optional[float] = None) -> ModelSpec:
    name = f"FasterNet-{variant}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=248, interpolation="bicubic",
                        min_input_size=32,
                        optimizer=OptimizerCfg(name="AdamW", beta1=0.9, beta2=0.999, epsilon=1e-8,
                                               weight_decay=weight_decay, one_dim_param_no_weight_decay=True,
                                               clip_grad_norm=clip_grad_norm, learning_rate=6e-4,
                                               warmup_epochs=20))
    return ModelSpec(name, "fasternet", "fasternet", kwargs={"variant": variant}, cfg=cfg,
                     paddleclas_name=f"FasterNet_{variant}")


SPECS = (
    _spec("T0", 0.005),
    _spec("T1", 0.01),
    _spec("T2", 0.02),
    _spec("S", 0.03),
    _spec("M", 0.05, clip_grad_norm=1.0),
    _spec("L", 0.05, clip_grad_norm=0.01),
)

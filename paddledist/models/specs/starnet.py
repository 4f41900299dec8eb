"""StarNet-S1..S4 (PaddleClas model_zoo.starnet), with PaddleX's values.

From PaddleX's training configs: AdamW (0.9, 0.999, eps 1e-8), weight decay 0.05 with 1-D parameters
exempt, no gradient clipping, cosine schedule from 3e-3 with 5 warm-up epochs; stochastic depth 0 / 0.01 /
0.01 / 0.02; train crop 224, eval bicubic resize 256 / crop 224.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(variant: str, drop_path_rate: float) -> ModelSpec:
    name = f"StarNet-{variant}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=256, interpolation="bicubic",
                        min_input_size=32,
                        optimizer=OptimizerCfg(name="AdamW", beta1=0.9, beta2=0.999, epsilon=1e-8,
                                               weight_decay=0.05, one_dim_param_no_weight_decay=True,
                                               learning_rate=3e-3, warmup_epochs=5))
    return ModelSpec(name, "starnet", "starnet", kwargs={"variant": variant, "drop_path_rate": drop_path_rate},
                     cfg=cfg, paddleclas_name=f"StarNet_{variant}")


SPECS = (
    _spec("S1", 0.0),
    _spec("S2", 0.01),
    _spec("S3", 0.01),
    _spec("S4", 0.02),
)

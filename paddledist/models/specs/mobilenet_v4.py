"""MobileNetV4_conv_small/medium/large, _hybrid_medium/large (PaddleClas legendary_models.mobilenet_v4),
with PaddleX's values.

From PaddleX's training configs: AdamW (0.9, 0.999, eps 1e-8) with 1-D parameters exempt from decay,
gradient clipping at global norm 5, cosine schedule from 2e-3 (hybrid_medium 1e-3) with 20 warm-up epochs
(conv_small 5), weight decay 0.06 / 0.1 / 0.2 / 0.1 / 0.1; Arch drop_rate and drop_path_rate as passed.
Sizes: PaddleX evaluates and exports these at Global.image_shape (bicubic resize-short = crop = 256 / 320 /
448 / 256 / 448), which is input_size here; its training crops are smaller (224 / 256 / 384 / 224 / 384),
which a single input_size cannot say: set Train.input_size to train at those.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(variant: str, size: int, weight_decay: float, learning_rate: float, warmup_epochs: int,
          drop_rate: float, drop_path_rate: float) -> ModelSpec:
    name = f"MobileNetV4_{variant}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=size, resize_short=size, interpolation="bicubic",
                        min_input_size=32,
                        optimizer=OptimizerCfg(name="AdamW", beta1=0.9, beta2=0.999, epsilon=1e-8,
                                               weight_decay=weight_decay, one_dim_param_no_weight_decay=True,
                                               clip_grad_norm=5.0, learning_rate=learning_rate,
                                               warmup_epochs=warmup_epochs))
    kwargs = {"variant": variant, "drop_rate": drop_rate, "drop_path_rate": drop_path_rate}
    return ModelSpec(name, "mobilenet_v4", "mobilenet_v4", kwargs=kwargs, cfg=cfg, paddleclas_name=name)


SPECS = (
    _spec("conv_small", 256, 0.06, 2e-3, 5, 0.25, 0.03),
    _spec("conv_medium", 320, 0.1, 2e-3, 20, 0.2, 0.1),
    _spec("conv_large", 448, 0.2, 2e-3, 20, 0.2, 0.35),
    _spec("hybrid_medium", 256, 0.1, 1e-3, 20, 0.2, 0.1),
    _spec("hybrid_large", 448, 0.1, 2e-3, 20, 0.2, 0.1),
)

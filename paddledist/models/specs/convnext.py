"""ConvNeXt (PaddleClas model_zoo.convnext) with PaddleX's training values (ConvNeXt_tiny.yaml): AdamW
beta 0.9/0.999, eps 1e-8, weight decay 0.05, one_dim_param_no_weight_decay, cosine lr 4e-3 with 20 warm-up
epochs; Arch drop_path_rate 0.1, layer_scale_init_value 1e-6; eval bicubic resize 256, crop 224.
Only ConvNeXt_tiny's PaddleX config was read; the others are assumed to share its optimizer (not verified).
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url

_OPT = OptimizerCfg(name="AdamW", weight_decay=0.05, one_dim_param_no_weight_decay=True,
                    learning_rate=4e-3, warmup_epochs=20)


def _spec(name: str, size: str, side: int) -> ModelSpec:
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=side, resize_short=256 if side == 224 else side,
                        interpolation="bicubic", min_input_size=32, optimizer=_OPT)
    return ModelSpec(name, "convnext", "convnext", kwargs={"size": size, "drop_path_rate": 0.1}, cfg=cfg,
                     paddleclas_name=name)


SPECS = (_spec("ConvNeXt_tiny", "tiny", 224), _spec("ConvNeXt_small", "small", 224),
         _spec("ConvNeXt_base_224", "base", 224), _spec("ConvNeXt_base_384", "base", 384),
         _spec("ConvNeXt_large_224", "large", 224), _spec("ConvNeXt_large_384", "large", 384))

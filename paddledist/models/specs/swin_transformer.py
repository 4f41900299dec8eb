"""Swin Transformer (PaddleClas legendary_models.swin_transformer) with PaddleX's training values, read from
PaddleX's SwinTransformer_tiny_patch4_window7_224.yaml, ..._base_patch4_window12_384.yaml and
..._large_patch4_window12_384.yaml (the same Optimizer section in each): AdamW beta 0.9/0.999, eps 1e-8,
weight decay 0.05 except absolute_pos_embed, relative_position_bias_table, biases, norms and 1-D parameters;
cosine lr 1e-3 (eta_min 2e-5) with 20 warm-up epochs. Eval: bicubic resize 256 / crop 224, and for the
window-12 models resize 438 / crop 384. Their Arch sections set no drop_path_rate, so PaddleClas's per-model
defaults apply (tiny 0.2, small 0.3, base 0.5, large 0.1). The window sizes fix the input side.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url

_OPT = OptimizerCfg(name="AdamW", weight_decay=0.05, beta1=0.9, beta2=0.999, epsilon=1e-8,
                    no_weight_decay_name=("absolute_pos_embed", "relative_position_bias_table", ".bias", "norm"),
                    one_dim_param_no_weight_decay=True, learning_rate=1e-3, warmup_epochs=20)


def _spec(size: str, window: int, side: int) -> ModelSpec:
    name = f"SwinTransformer_{size}_patch4_window{window}_{side}"
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=side, resize_short=256 if side == 224 else 438,
                        interpolation="bicubic", min_input_size=side, fixed_input_size=True, optimizer=_OPT)
    return ModelSpec(name, "swin_transformer", "swin_transformer", kwargs={"size": size, "window_size": window},
                     cfg=cfg, paddleclas_name=name)


SPECS = (_spec("tiny", 7, 224), _spec("small", 7, 224), _spec("base", 7, 224), _spec("base", 12, 384),
         _spec("large", 7, 224), _spec("large", 12, 384))

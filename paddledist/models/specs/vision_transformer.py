"""CLIP ViT (PaddleClas model_zoo.foundation_vit) with PaddleX's training values
(CLIP_vit_base_patch16_224.yaml, CLIP_vit_large_patch14_224.yaml): AdamWDL beta 0.9/0.999, eps 1e-8,
weight decay 0.05, layerwise_decay 0.6, filter_bias_and_bn, cosine lr 3e-4 (eta_min 1e-6, warm-up from 1e-6
over 5 epochs for the base, 10 for the large); Arch return_embed False, use_fused_attn/use_fused_linear True,
no dropout or drop path; eval bicubic resize 224, crop 224, ImageNet mean/std (PaddleX's NormalizeImage uses
ImageNet's values, not CLIP's). Position embeddings fix the input at 224.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(name: str, variant: str, warmup: int) -> ModelSpec:
    opt = OptimizerCfg(name="AdamWDL", weight_decay=0.05, layerwise_decay=0.6, filter_bias_and_bn=True,
                       learning_rate=3e-4, warmup_epochs=warmup)
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=224, interpolation="bicubic",
                        min_input_size=224, fixed_input_size=True, optimizer=opt)
    kwargs = {"variant": variant, "use_fused_attn": True, "use_fused_linear": True}
    return ModelSpec(name, "vision_transformer", "clip_vit", kwargs=kwargs, cfg=cfg, paddleclas_name=name)


SPECS = (_spec("CLIP_vit_base_patch16_224", "base_patch16", 5),
         _spec("CLIP_vit_large_patch14_224", "large_patch14", 10))

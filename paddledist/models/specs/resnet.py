"""ResNet18/34/50/101/152 and the vd nets 18-200 (PaddleClas legendary_models.resnet), with PaddleX's values.

From PaddleX's training configs (paddlex/repo_apis/PaddleClas_api/configs/<name>.yaml): Momentum 0.9, base
learning rate 0.1, eval resize 256 / crop 224. The plain nets (except ResNet50) use a piecewise schedule with
no warm-up; ResNet50 a cosine one with 5 warm-up epochs; the vd nets cosine without warm-up, L2 7e-5 up to
ResNet50_vd and 1e-4 above.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url


def _spec(name: str, depth: int, vd: bool, weight_decay: float, warmup_epochs: int) -> ModelSpec:
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=224, resize_short=256, min_input_size=32,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=weight_decay,
                                               learning_rate=0.1, warmup_epochs=warmup_epochs,
                                               schedule="piecewise" if not vd and depth != 50 else "cosine"))
    return ModelSpec(name, "resnet", "resnet", kwargs={"depth": depth, "vd": vd}, cfg=cfg, paddleclas_name=name)


SPECS = (
    _spec("ResNet18", 18, False, 1e-4, 0),
    _spec("ResNet34", 34, False, 1e-4, 0),
    _spec("ResNet50", 50, False, 1e-4, 5),
    _spec("ResNet101", 101, False, 1e-4, 0),
    _spec("ResNet152", 152, False, 1e-4, 0),
    _spec("ResNet18_vd", 18, True, 7e-5, 0),
    _spec("ResNet34_vd", 34, True, 7e-5, 0),
    _spec("ResNet50_vd", 50, True, 7e-5, 0),
    _spec("ResNet101_vd", 101, True, 1e-4, 0),
    _spec("ResNet152_vd", 152, True, 1e-4, 0),
    _spec("ResNet200_vd", 200, True, 1e-4, 0),
)

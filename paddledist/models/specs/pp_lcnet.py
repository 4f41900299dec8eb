"""PP-LCNet_x0_25..x2_5 (PaddleClas legendary_models.pp_lcnet) and PaddleX's four special PP-LCNet_x1_0/x0_25
models, with PaddleX's values (paddlex/repo_apis/PaddleClas_api/configs/<name>.yaml).

ImageNet widths: Momentum 0.9, cosine with 5 warm-up epochs; eval resize-short 256, crop 224.
The text-line orientation models (2 classes) take 80 high x 160 wide images (PaddleX's ResizeImage
size [160, 80], no crop; input_size is the width, input_height the height) and keep full width resolution
in stages 3-6 (stride_list [2, [2, 1] x 4]: a total stride of 32 in height). doc_ori: 4 classes, no last
conv; table_cls: 2 classes.
"""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg, paddlex_url

TEXTLINE_STRIDES = (2, (2, 1), (2, 1), (2, 1), (2, 1))


def _spec(name: str, scale: float, lr: float, l2: float, num_classes: int = 1000, input_size: int = 224,
          resize_short: int = 256, min_input_size: int = 32, input_height=None, train_crop="random_resized_crop",
          **kwargs) -> ModelSpec:
    cfg = PretrainedCfg(url=paddlex_url(name), input_size=input_size, resize_short=resize_short,
                        num_classes=num_classes, min_input_size=min_input_size, input_height=input_height,
                        train_crop=train_crop,
                        optimizer=OptimizerCfg(name="Momentum", momentum=0.9, weight_decay=l2,
                                               learning_rate=lr, warmup_epochs=5))
    pc_name = "PPLCNet_x" + str(scale).replace(".", "_")
    return ModelSpec(name, "pp_lcnet", "pp_lcnet", kwargs={"scale": scale, **kwargs}, cfg=cfg,
                     paddleclas_name=pc_name)


SPECS = (
    _spec("PP-LCNet_x0_25", 0.25, 0.8, 3e-5),
    _spec("PP-LCNet_x0_35", 0.35, 0.8, 3e-5),
    _spec("PP-LCNet_x0_5", 0.5, 0.8, 3e-5),
    _spec("PP-LCNet_x0_75", 0.75, 0.8, 3e-5),
    _spec("PP-LCNet_x1_0", 1.0, 0.1, 3e-5),
    _spec("PP-LCNet_x1_5", 1.5, 0.8, 4e-5),
    _spec("PP-LCNet_x2_0", 2.0, 0.8, 4e-5),
    _spec("PP-LCNet_x2_5", 2.5, 0.8, 4e-5),
    _spec("PP-LCNet_x0_25_textline_ori", 0.25, 0.8, 1e-5, num_classes=2, input_size=160, resize_short=160,
          input_height=80, min_input_size=64, train_crop="resize", stride_list=TEXTLINE_STRIDES),
    _spec("PP-LCNet_x1_0_textline_ori", 1.0, 0.8, 4e-5, num_classes=2, input_size=160, resize_short=160,
          input_height=80, min_input_size=64, train_crop="resize", stride_list=TEXTLINE_STRIDES),
    _spec("PP-LCNet_x1_0_doc_ori", 1.0, 0.14, 3e-5, num_classes=4, use_last_conv=False),
    _spec("PP-LCNet_x1_0_table_cls", 1.0, 0.1, 3e-5, num_classes=2),
)

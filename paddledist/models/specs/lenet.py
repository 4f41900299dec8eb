"""LeNet: paddledist's own small batch-norm-free CNN (the default job on the bundled digits)."""

from paddledist.models.registry import ModelSpec, OptimizerCfg, PretrainedCfg

SPECS = (
    ModelSpec("LeNet", "lenet", "lenet", cfg=PretrainedCfg(
        url=None, input_size=32, resize_short=32, num_classes=10, min_input_size=4, train_crop="pad_crop",
        optimizer=OptimizerCfg(learning_rate=0.05, warmup_epochs=0)),
        classifier=("fc.5",)),
)

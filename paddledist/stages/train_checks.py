"""The train stage's checks before anything is written: model, data, labels, weight files.

Kept apart from stages/train.py so that the launching process runs them without importing paddle (only a
resume or pretrained file needs it, to build the model they must fit)."""

from __future__ import annotations

from paddledist.config import Config
from paddledist.data.formats import check_files, load_samples
from paddledist.engine import checkpoint
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError
from paddledist.models import build_model, check_model_name
from paddledist.stages.common import check_labels


def preflight(cfg: Config, dist: DistEnv):
    """Everything checkable before anything is written: model, data, labels, weight files."""
    check_model_name(cfg.Global.model)
    g = cfg.Global
    train, val = (load_samples(g.dataset_dir, split, g.seed, g.allow_outside_paths) for split in ("train", "val"))
    for samples, split in ((train, "train"), (val, "val")):
        if len(samples) == 0:
            raise UserError(f"{cfg.Global.dataset_dir}: the {split} split is empty")
        check_labels(samples, cfg.Train.num_classes, cfg.Global.dataset_dir)
        check_files(samples)
    resume = _read_weights(cfg.Train.resume_path, "Train.resume_path", dist)
    pretrain = _read_weights(cfg.Train.pretrain_weight_path, "Train.pretrain_weight_path", dist)
    if resume or pretrain:
        _check_fits(cfg, resume, pretrain)
    return train, val, resume, pretrain


def _check_fits(cfg: Config, resume, pretrain) -> None:
    """Weights must fit Global.model before anything is written: paddle itself would skip a misfit with a
    warning and train on from a fresh layer."""
    # A throwaway model must not shift the real one's parameter names, which key the optimizer state (.pdopt).
    import paddle

    with paddle.utils.unique_name.guard():
        own = build_model(cfg.Global.model, cfg.Train.num_classes, cfg.Train.input_size).state_dict()
    if resume:
        bad = [k for k in own if k not in resume.params or list(resume.params[k].shape) != list(own[k].shape)]
        if bad:
            raise UserError(f"Train.resume_path: {cfg.Train.resume_path} does not fit Global.model={cfg.Global.model} "
                            f"with Train.num_classes={cfg.Train.num_classes} (missing or wrong shape: "
                            f"{', '.join(bad[:5])}); resume with the settings the checkpoint was trained with")
    if pretrain:
        pretrained_head(own, pretrain.params, cfg.Train.pretrain_weight_path)


def _read_weights(path, what: str, dist: DistEnv):
    # The file may exist on the first machine only: rank 0 reads it and shares it (see broadcast_object).
    if not path:
        return None
    return checkpoint.load(path, what) if dist.is_main else None


def pretrained_head(own: dict, params: dict, path: str) -> set:
    """The classifier head's keys when only they differ in shape (another class count: skipped on loading);
    any other missing or misfitting key is an error."""
    missing = [k for k in own if k not in params]
    misfit = [k for k in own if k in params and list(params[k].shape) != list(own[k].shape)]
    head = {k for k in misfit if k == list(own)[-1] or k == list(own)[-2]}
    if missing or set(misfit) - head:
        bad = (missing + [k for k in misfit if k not in head])[:5]
        raise UserError(f"Train.pretrain_weight_path: {path} does not fit the model (missing or wrong shape: "
                        f"{', '.join(bad)}); use weights of the same Global.model")
    return head

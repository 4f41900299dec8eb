"""The train stage's checks before anything is written: model, input size, data, labels, weight files.

Kept apart from stages/train.py so that the launching process runs them without importing paddle (only a
resume or pretrained file needs it, to build the model they must fit). Weight URLs are downloaded here, in
the launching process, before any worker starts (the workers then find the cached file)."""

from __future__ import annotations

import os
from typing import Optional

from paddledist.config import Config
from paddledist.data.formats import check_files, load_samples
from paddledist.engine import batchplan, checkpoint
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError
from paddledist.models import build_model, check_model_name, model_spec
from paddledist.models.recipe import recipe
from paddledist.stages import weights
from paddledist.stages.common import check_labels

AUTO = "auto"
"""Train.resume_path: auto: continue from <Global.output>/latest when there is one (a restart, a requeued job)."""


def is_auto(resume_path) -> bool:
    """Train.resume_path=auto, however it is spelled."""
    return str(resume_path or "").strip().lower() == AUTO


def preflight(cfg: Config, dist: DistEnv, dry_run: bool = False):
    """Everything checkable before anything is written: model, data, labels, weight files."""
    check_model_name(cfg.Global.model)
    g = cfg.Global
    chosen = recipe(cfg)
    if dry_run:
        print(f"paddledist: dry run: {g.model}: {chosen.summary()}", flush=True)
    train, val = (load_samples(g.dataset_dir, split, g.seed, g.allow_outside_paths) for split in ("train", "val"))
    for samples, split in ((train, "train"), (val, "val")):
        if len(samples) == 0:
            raise UserError(f"{cfg.Global.dataset_dir}: the {split} split is empty")
        check_labels(samples, cfg.Train.num_classes, cfg.Global.dataset_dir)
        check_files(samples)
    resume = _read_weights(cfg, cfg.Train.resume_path, "Train.resume_path", dist, dry_run)
    pretrain = _read_weights(cfg, cfg.Train.pretrain_weight_path, "Train.pretrain_weight_path", dist, dry_run)
    if resume or pretrain:
        _check_fits(cfg, resume, pretrain)
    batch = batchplan.plan_for(cfg, dist.world_size, resume.states if resume else None)  # or one line, exit 2
    if resume:
        resume = _same_batch_or_epoch_start(cfg, resume, batch.global_batch)
    return train, val, resume, pretrain


def _same_batch_or_epoch_start(cfg: Config, resume, now: int):
    """A preemption checkpoint continues at its step, counted in this run's batches: only right at its global
    batch (`now`, which engine/batchplan.py keeps across rank counts where it can). On another global batch with
    Train.resume_path=auto (Train.global_batch_size changed, or Train.elastic_batch=scale_lr gave it up) the
    interrupted epoch starts again instead, from epoch_<N> (None: from the beginning)."""
    states = resume.states or {}
    step, saved = states.get("step_in_epoch", 0), states.get("global_batch")
    if not step or saved == now:
        return resume
    done = int(states.get("epoch", 0))
    where = (f"{resume.path} was saved at step {step} of epoch {done + 1} with a global batch of {saved} samples, "
             f"this run has {now}")
    if not is_auto(cfg.Train.resume_path):
        raise UserError(f"Train.resume_path: {where}; resume a mid-epoch checkpoint with the same Train.batch_size, "
                        "number of processes and Train.accum_steps")
    again = (f"paddledist: Train.resume_path=auto: {where}; a mid-epoch checkpoint continues only at its own "
             "global batch")
    if done == 0:
        print(f"{again}: starting epoch 1 again from the beginning", flush=True)
        return None
    path = os.path.join(cfg.Global.output, f"epoch_{done}", f"epoch_{done}.pdparams")
    if not os.path.isfile(path):
        raise UserError(f"Train.resume_path=auto: {where}, and there is no {path} to start epoch {done + 1} again "
                        "from: run on the same number of machines (and Train.batch_size, Train.accum_steps)")
    print(f"{again}: starting epoch {done + 1} again from {path}", flush=True)
    return checkpoint.load(path, "Train.resume_path")


def model_shapes(cfg: Config) -> dict:
    """Name -> shape of Global.model's state dict, built under paddle.LazyGuard (nothing allocated)."""
    # A throwaway model must not shift the real one's parameter names, which key the optimizer state (.pdopt).
    import paddle

    with paddle.utils.unique_name.guard(), paddle.LazyGuard():
        own = build_model(cfg.Global.model, cfg.Train.num_classes, recipe(cfg).input_size).state_dict()
    return {k: [int(d) for d in v.shape] for k, v in own.items()}


def _check_fits(cfg: Config, resume, pretrain) -> None:
    """Weights must fit Global.model before anything is written: paddle itself would skip a misfit with a
    warning and train on from a fresh layer."""
    own = model_shapes(cfg)
    if resume:
        bad = [k for k in own if k not in resume.params or list(resume.params[k].shape) != own[k]]
        if bad:
            raise UserError(f"Train.resume_path: {resume.path} does not fit Global.model={cfg.Global.model} "
                            f"with Train.num_classes={cfg.Train.num_classes} (missing or wrong shape: "
                            f"{', '.join(bad[:5])}); resume with the settings the checkpoint was trained with")
    if pretrain:
        pretrain.fit = weights.fit_pretrained(own, pretrain.params, model_spec(cfg.Global.model).classifier,
                                              "Train.pretrain_weight_path", pretrain.path)


def _read_weights(cfg: Config, value, key: str, dist: DistEnv, dry_run: bool):
    # The file may exist on the first machine only: rank 0 reads it and shares it (see broadcast_object).
    if not value or not dist.is_main:
        return None
    if key == "Train.resume_path" and is_auto(value):
        value = auto_resume(cfg.Global.output)
        if value is None:
            return None
    path = weights.source(value, key, cfg.Global.model, dry_run)
    if weights.pending(path, dry_run):
        return None
    return checkpoint.load(path, key)


def auto_resume(output: str) -> Optional[str]:
    """Train.resume_path=auto: <output>/latest/latest.pdparams when it exists, else None (a fresh start); says which."""
    path = os.path.join(output, "latest", "latest.pdparams")
    if os.path.isfile(path):
        print(f"paddledist: Train.resume_path=auto: resuming from {path}", flush=True)
        return path
    print(f"paddledist: Train.resume_path=auto: no {path} yet; starting from the beginning", flush=True)
    return None

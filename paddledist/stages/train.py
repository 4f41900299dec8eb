"""The train stage inside one worker process: build data, model, optimiser and hooks, then run the loop."""

from __future__ import annotations

import functools
import logging
import os
import socket
from typing import Optional

import paddle

from paddledist.config import Config, to_yaml
from paddledist.data.pipeline import EvalBatchSampler, ImageDataset, TrainBatchSampler, Transform, make_loader
from paddledist.engine import batchplan, cpu, latest, optim, sync
from paddledist.engine.distenv import DistEnv, broadcast_object, init_process_group
from paddledist.engine.checkpoint_hooks import CheckpointHook, PreemptHook
from paddledist.engine.hooks import (DataErrorHook, DigestHook, EpochBarrierHook, EvalHook, LogHook, ProgressHook,
                                     ResultHook, VisualDLHook)
from paddledist.engine.snapshot import restore
from paddledist import report
from paddledist.stages import export
from paddledist.runfiles.progress import Progress
from paddledist.engine.schedule import resume_step, updates_per_epoch
from paddledist.engine.trainer import Trainer, TrainState
from paddledist.fsio import atomic_write
from paddledist.launch import control
from paddledist.models import build_model, model_spec
from paddledist.models.recipe import recipe
from paddledist.stages.common import set_device, setup_logging
from paddledist.stages.train_checks import is_auto, preflight

log = logging.getLogger("paddledist")


def run(cfg: Config, dist: DistEnv) -> None:
    cpu_settings = cpu.apply_defaults(cfg.Train.fast_mkl_on_amd)  # before paddle's first computation
    malloc = cpu.keep_freed_memory()
    train_samples, val_samples, resume, pretrain = preflight(cfg, dist)
    kind = set_device(cfg, dist)
    init_process_group(dist)
    pretrain = broadcast_object(pretrain, dist)
    if dist.is_main:
        _write_run_files(cfg, train_samples)  # the configuration as given; the batch plan below is the run's
    setup_logging(cfg.Global.output, "train", dist)
    if dist.is_main:
        log.info("resolved config:\n%s", to_yaml(cfg))
        log.info("MKL: %s", " ".join(f"{k}={v}" for k, v in cpu_settings.items()) or "default code path")
        log.info("malloc: %s", " ".join(f"{k}={v}" for k, v in malloc.items()) or "as the environment sets it")
    resume = latest.agree_resume(cfg.Global.output, dist, resume, is_auto(cfg.Train.resume_path))
    own_latest = latest.writes_latest(cfg.Global.output, dist)
    batch = batchplan.plan_for(cfg, dist.world_size, resume.states if resume else None)
    if batch.note and dist.is_main:
        log.info("%s", batch.note)
    trainer = build_trainer(batchplan.applied(cfg, batch), dist, kind, train_samples, val_samples, pretrain, resume,
                            batch, own_latest)
    trainer.train()


def _write_run_files(cfg: Config, samples) -> None:
    os.makedirs(cfg.Global.output, exist_ok=True)
    atomic_write(os.path.join(cfg.Global.output, "config.yaml"), to_yaml(cfg))
    atomic_write(os.path.join(cfg.Global.output, "label_dict.txt"),
                 "".join(f"{i} {name}\n" for i, name in enumerate(_label_names(cfg, samples))))


def _label_names(cfg: Config, samples) -> list[str]:
    return samples.label_names or [str(i) for i in range(cfg.Train.num_classes)]


def build_trainer(cfg: Config, dist: DistEnv, kind: str, train_samples, val_samples, pretrain, resume,
                  batch: batchplan.BatchPlan, own_latest: bool = False) -> Trainer:
    """`cfg` carries the batch plan's per-rank batch and accumulation (batchplan.applied); `own_latest`: this
    rank writes its machine's own latest (engine/latest.py)."""
    t = cfg.Train
    rec = recipe(cfg)
    model = _model(cfg, rec, pretrain, dist.is_main)
    train_set = ImageDataset(train_samples, Transform.of(rec, True, t.augment))
    sampler = TrainBatchSampler(len(train_set), t.batch_size, dist.world_size, dist.rank, cfg.Global.seed)
    val_set = ImageDataset(val_samples, Transform.of(rec, False, False))
    val_sampler = EvalBatchSampler(len(val_set), t.batch_size, dist.world_size, dist.rank)
    val_loader = make_loader(val_set, val_sampler, t.num_workers)
    optimizer, scheduler = build_optimizer(cfg, dist, model, len(sampler), batch)
    scaler = paddle.amp.GradScaler() if t.amp and kind == "gpu" else None
    state = restore(model, optimizer, resume, t.accum_steps) if resume else TrainState()
    if resume:
        continue_schedule(scheduler, state, updates_per_epoch(len(sampler), t.accum_steps), t.accum_steps)
    model, optimizer, grad_sync = sync.build(t.grad_sync, model, optimizer, kind, dist, t.heartbeat_timeout,
                                             scaler, t.grad_bucket_mb, t.grad_compression or "none")
    trainer = Trainer(cfg, dist, model, optimizer, scheduler, make_loader(train_set, sampler, t.num_workers), sampler,
                      _hooks(cfg, dist, val_loader, own_latest, _label_names(cfg, train_samples)), scaler, grad_sync)
    trainer.state = state
    trainer.inference_pir = export.with_pir(cfg, os.environ) if t.uniform_output_enabled else None
    trainer.restarts = this_start(control.restarts_from(os.environ), resume.states if resume else None, batch)
    trainer.machine = control.machine_from(os.environ) or {"host": socket.gethostname(), "nic": "",
                                                            "device": cfg.Global.device}
    return trainer


def _model(cfg: Config, rec, pretrain, is_main: bool):
    """Global.model with the pretrained weights the preflight fitted, traced with Train.dy2st."""
    paddle.seed(cfg.Global.seed)
    if is_main:
        print(f"paddledist: {cfg.Global.model}: {rec.summary()}", flush=True)
        if rec.size_warning(cfg.Global.model):
            print(rec.size_warning(cfg.Global.model), flush=True)
    model = build_model(cfg.Global.model, cfg.Train.num_classes, rec.input_size)
    if pretrain:
        load_pretrained(model, pretrain, is_main)
    if cfg.Train.dy2st:  # PaddleX's Train.dy2st: the forward runs as paddle's static program (same parameters)
        model = paddle.jit.to_static(model, full_graph=True)
        if is_main:
            print("paddledist: Train.dy2st: the forward runs as paddle's static program (paddle.jit.to_static)",
                  flush=True)
    return model


def _hooks(cfg: Config, dist: DistEnv, val_loader, own_latest: bool, labels: list[str]) -> list:
    """The trainer's hooks; the per-checkpoint export gets the label names read once here."""
    exporter = (functools.partial(export.write_inference, cfg, labels=labels, warned=set())
                if cfg.Train.uniform_output_enabled else None)
    hooks = [LogHook(), DataErrorHook(), EvalHook(val_loader), CheckpointHook(own_latest, exporter),
             ResultHook(report.write),
             DigestHook(),
             VisualDLHook(cfg.Global.output, cfg.Train.visualdl, dist.is_main)]
    folder = os.environ.get(control.CONTROL_VAR)
    if folder:  # launched by a supervisor, which may ask for a save at the next step (a preemption)
        hooks.append(PreemptHook(control.preempt_flag(folder), control.saved_flag(folder), own_latest))
    progress = Progress.from_env(os.environ, dist.rank)
    if progress.enabled:  # the stall watchdog runs (launch/stall.py)
        hooks = [ProgressHook(progress), *hooks, EpochBarrierHook()]
    return hooks


def build_optimizer(cfg: Config, dist: DistEnv, model, steps_per_epoch: int,
                    batch: Optional[batchplan.BatchPlan] = None):
    """The recipe's optimizer (Momentum with L2 or AdamW with its no-decay sets, optional clipping) and schedule."""
    t, rec = cfg.Train, recipe(cfg)
    batch = batch or batchplan.plan_for(cfg, dist.world_size)
    updates = updates_per_epoch(steps_per_epoch, t.accum_steps)
    total, warmup = t.epochs_iters * updates, t.warmup_steps * updates
    base = batch.learning_rate(t.learning_rate, t.scale_lr)
    if t.scale_lr and dist.is_main:
        print(f"paddledist: linear LR scaling: {t.learning_rate} x {batch.global_batch} / {batch.configured_batch} "
              f"= {base}", flush=True)
    scheduler = optim.schedule(rec, base, total, warmup, updates)
    opt = model_spec(cfg.Global.model).cfg.optimizer
    betas = (opt.beta1, opt.beta2, opt.epsilon) if opt.name == rec.optimizer else ()
    return optim.make_optimizer(rec, model, scheduler, *betas), scheduler


def continue_schedule(scheduler, state: TrainState, updates: int, accum_steps: int) -> None:
    """The LR schedule continues by progress, not by the saved step count: a resume with another batch size,
    world size or accumulation has another number of updates per epoch, and replaying the saved count against
    it put the learning rate back near its peak (and left it above 0 at the end). Checkpoints are taken at
    epoch ends, so the epochs done measure the samples seen; a preemption checkpoint adds the updates of its
    partial epoch (taken at an update boundary, at the same global batch: restore checks it)."""
    step = resume_step(state.start_epoch - 1, updates) + state.start_iter // accum_steps
    if step != state.global_step:
        log.info("resume: %d updates per epoch now (the checkpoint's run made %d updates in %d epochs); the "
                 "learning-rate schedule continues at update %d, by the epochs done", updates,
                 state.global_step, state.start_epoch - 1, step)
    scheduler.step(step)
    state.global_step = step


def load_pretrained(model, pretrain, is_main: bool) -> None:
    """Load what the preflight's fit says: tensors by name; a classifier head of another class count stays."""
    model.set_state_dict({k: pretrain.params[k] for k in pretrain.fit.loaded})
    if is_main:
        print(pretrain.fit.summary(pretrain.path), flush=True)





def this_start(restarts: list, states: Optional[dict], batch: batchplan.BatchPlan) -> list:
    """The supervisor's restarts so far (causes), each with the world size, per-rank batch and accumulation it
    ran with: earlier ones as the resumed checkpoint recorded them, the last (this start's) from `batch`."""
    saved = [r for r in (states or {}).get("restarts", []) if isinstance(r, dict)]
    merged = [{**saved[i], **r} if i < len(saved) else dict(r) for i, r in enumerate(restarts)]
    if merged:
        merged[-1].update(world_size=batch.world_size, batch_size=batch.batch_size, accum_steps=batch.accum_steps)
    return merged

"""Cross-field and range checks; each failure names the key and how to fix it."""

from __future__ import annotations

import dataclasses
import math

from paddledist.config.device import parse_device
from paddledist.config.nodecount import parse_nnodes
from paddledist.config.schema import (CONTROL_PLANES, ELASTIC_BATCH, GRAD_COMPRESSION, GRAD_SYNC, GRAD_SYNCS,
                                      LAUNCH_STYLES, LR_SCHEDULERS, MODES, OPTIMIZERS, Config)
from paddledist.errors import UserError

# key -> (minimum, inclusive?)
_MINIMA = {
    "Train.epochs_iters": (1, True), "Train.batch_size": (1, True), "Train.learning_rate": (0, False),
    "Train.num_classes": (1, True), "Train.log_interval": (1, True), "Train.eval_interval": (1, True),
    "Train.save_interval": (1, True), "Train.max_epoch_checkpoints": (1, True), "Train.warmup_steps": (0, True),
    "Train.input_size": (8, True),
    "Train.num_workers": (0, True), "Train.momentum": (0, True), "Train.weight_decay": (0, True),
    "Train.accum_steps": (1, True), "Train.global_batch_size": (1, True), "Train.port": (1024, True),
    "Train.peer_timeout": (1, True),
    "Train.max_bad_samples": (0, True), "Train.heartbeat_interval": (0, False), "Train.heartbeat_timeout": (0, False),
    "Train.max_restarts": (0, True), "Train.preempt_grace": (0, False),
    "Train.stall_timeout": (0, True),
    "Train.clip_grad_norm": (0, True), "Evaluate.log_interval": (1, True), "Predict.batch_size": (1, True),
    "Global.seed": (0, True),
}
# key -> maximum: past these a job fails deep inside paddle or numpy (a seed past 2**31 - 1, a 10**6-pixel
# side's first batch), after files were written; refused up front instead
_MAXIMA = {
    "Global.seed": 2**31 - 1, "Train.input_size": 1024, "Train.batch_size": 1 << 16, "Train.epochs_iters": 1 << 20,
    "Train.num_classes": 1 << 20, "Train.num_workers": 64, "Train.accum_steps": 1 << 16,
    "Train.global_batch_size": 1 << 24,
    "Train.peer_timeout": 86400, "Predict.batch_size": 1 << 16,
}


def normalise(cfg: Config) -> Config:
    """Canonical forms: `Global.mode` always a tuple of stage names."""
    mode = cfg.Global.mode
    modes = tuple(mode) if isinstance(mode, (list, tuple)) else (mode,)
    return dataclasses.replace(cfg, Global=dataclasses.replace(cfg.Global, mode=modes))


def validate(cfg: Config) -> None:
    for key, (low, inclusive) in _MINIMA.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is None:  # null: the model's own value (paddledist.models.recipe)
            continue
        bound = f">= {low}" if inclusive else f"> {low}"
        # written as "not ok" so that NaN, which compares false to everything, fails too
        if not (value >= low if inclusive else value > low) or not math.isfinite(value):
            kind = "a finite number " if isinstance(value, float) else ""
            raise UserError(f"{key} must be {kind}{bound}, got {value} (set it in the config or with -o {key}=...)")
    for key, high in _MAXIMA.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None and value > high:
            raise UserError(f"{key} must be <= {high}, got {value} (set it in the config or with -o {key}=...)")
    if cfg.Train.port > 65535 - 16:
        raise UserError(f"Train.port must leave room for the job's ports below 65535, got {cfg.Train.port}")
    if cfg.Train.heartbeat_timeout < 2 * cfg.Train.heartbeat_interval:
        raise UserError(f"Train.heartbeat_timeout ({cfg.Train.heartbeat_timeout}) must be at least twice "
                        f"Train.heartbeat_interval ({cfg.Train.heartbeat_interval}), so that one late heartbeat "
                        "does not stop the job; raise the timeout or lower the interval")
    _validate_modes(cfg.Global.mode)
    _validate_grad_sync(cfg)
    _validate_choice("Train.optimizer", cfg.Train.optimizer, OPTIMIZERS)
    _validate_choice("Train.lr_scheduler", cfg.Train.lr_scheduler, LR_SCHEDULERS)
    _validate_choice("Train.elastic_batch", cfg.Train.elastic_batch, ELASTIC_BATCH, "")
    parse_device(cfg.Global.device)
    _validate_split(cfg)
    _validate_dist_ips(cfg.Train.dist_ips)
    _validate_master(cfg)


def _validate_grad_sync(cfg: Config) -> None:
    sync = cfg.Train.grad_sync
    if sync not in GRAD_SYNC:
        raise UserError(f"Train.grad_sync: unknown value {sync!r}; use one of {', '.join(GRAD_SYNC)}")
    way = GRAD_SYNCS.get(sync)
    if way and way.cpu_only and parse_device(cfg.Global.device).accelerator:
        raise UserError(f"Train.grad_sync={sync} is for CPU jobs; GPU and other card jobs use reducer or auto")
    if way and way.one_machine and (len(cfg.Train.dist_ips or ()) > 1 or _most_nodes(cfg) > 1):
        raise UserError(f"Train.grad_sync={sync} needs every rank on one machine; with several machines use "
                        "bucket or auto")
    if cfg.Train.grad_compression not in (None, *GRAD_COMPRESSION):
        raise UserError(f"Train.grad_compression: unknown value {cfg.Train.grad_compression!r}; use one of "
                        f"{', '.join(GRAD_COMPRESSION)}")
    if cfg.Train.grad_bucket_mb <= 0:
        raise UserError(f"Train.grad_bucket_mb must be > 0, got {cfg.Train.grad_bucket_mb}")
    if cfg.Train.grad_compression == "fp16" and not parse_device(cfg.Global.device).accelerator:
        raise UserError("Train.grad_compression=fp16 is for GPU jobs (paddle's gloo all-reduce of float16 "
                        "returns inf on CPU); use bf16 or none")


def _most_nodes(cfg: Config) -> int:
    count = parse_nnodes(cfg.Train.nnodes)
    return count.most if count else 1


def _validate_choice(key: str, value, choices: tuple, null: str = " or null (the model's own)") -> None:
    if (value is not None or not null) and value not in choices:
        raise UserError(f"{key}: unknown value {value!r}; use one of {', '.join(choices)}{null}")


def _validate_modes(modes: tuple) -> None:
    if not modes:
        raise UserError(f"Global.mode is empty; use one of {', '.join(MODES)} or a list of them")
    for mode in modes:
        if mode not in MODES:
            raise UserError(f"Global.mode: unknown mode {mode!r}; use one of {', '.join(MODES)} or a list of them")


def _validate_split(cfg: Config) -> None:
    split = cfg.CheckDataset.split
    if not split.enable:
        return
    train, val = split.train_percent, split.val_percent
    if train is None or val is None or train <= 0 or val <= 0 or train + val != 100:
        raise UserError("CheckDataset.split: train_percent and val_percent must be positive and add up to 100, "
                        f"got {train} and {val}")


def _validate_dist_ips(ips) -> None:
    if ips is None:
        return
    if not ips:
        raise UserError("Train.dist_ips is empty; list every machine's address, e.g. 10.0.0.1,10.0.0.2, "
                        "or leave it unset")
    if any(not ip.strip() for ip in ips):
        raise UserError(f"Train.dist_ips has an empty entry in {','.join(ips)!r}; "
                        "list addresses like 10.0.0.1,10.0.0.2")


def _validate_master(cfg: Config) -> None:
    """Shapes only; names are resolved (and the key pairs checked) when the cluster is planned."""
    if cfg.Train.launch_style not in LAUNCH_STYLES:
        raise UserError(f"Train.launch_style: unknown value {cfg.Train.launch_style!r}; use one of "
                        f"{', '.join(LAUNCH_STYLES)}")
    if cfg.Train.control_plane not in CONTROL_PLANES:
        removed = cfg.Train.control_plane == "builtin"
        was = " (the builtin control plane was removed: the machines meet in etcd)" if removed else ""
        raise UserError(f"Train.control_plane: unknown value {cfg.Train.control_plane!r}{was}; use one of "
                        f"{', '.join(CONTROL_PLANES)}")
    parse_nnodes(cfg.Train.nnodes)
    master = cfg.Train.dist_master
    if master is None:
        return
    host, _, port = master.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"Train.dist_master={master!r} is not host:port; e.g. -o Train.dist_master=10.0.0.1:36543")

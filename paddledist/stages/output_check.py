"""Global.output checked before anything is launched or written, in --dry-run too (docs/security.md, "Limits").

Without these a wrong folder surfaced late as a traceback: an existing file as `FileExistsError` in the
first worker, a read-only mount or /proc in paddle's launcher, a full disk in the middle of a checkpoint.
Only the checking reads the disk: nothing is created, so an existing output stays byte-for-byte unchanged.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

from paddledist.config import Config
from paddledist.errors import UserError

PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
"""Kernel file systems: a folder there can be neither created nor written."""
SLACK_BYTES = 1 << 20
"""Logs, results, config.yaml and label_dict.txt besides the checkpoints."""
COARSE_PARAMS = 400_000_000
"""More parameters than any registered model has: when even this fits, the exact count is not needed."""


def check_output(cfg: Config, stages: Sequence[str]) -> None:
    """One line and exit 2 for an output folder the job could not use, or could not fill."""
    out = cfg.Global.output
    if not out.strip():
        raise UserError("Global.output is empty; set -o Global.output=PATH (a folder, created if missing)")
    folder = _existing_folder(out)
    real = os.path.realpath(folder)
    for root in PSEUDO_ROOTS:
        if real == root or real.startswith(root + "/"):
            raise UserError(f"Global.output={out} is under {root}, a kernel file system; choose a folder on a disk")
    if not os.access(folder, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only(folder) else "is not writable by this user"
        raise UserError(f"Global.output={out}: {folder} {why}; choose another folder with -o Global.output=PATH")
    if "train" in stages:
        _check_room(cfg, folder)


def _existing_folder(out: str) -> str:
    """The output folder itself when it exists, else its nearest existing parent (the folder it is made in)."""
    if os.path.islink(out) and not os.path.exists(out):
        raise UserError(f"Global.output={out} is a symbolic link to {os.readlink(out)}, which does not exist; "
                        "create the target or remove the link")
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise UserError(f"Global.output={out} exists and is not a folder; remove it or choose another path")
        return out
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        if os.path.islink(parent):
            raise UserError(f"Global.output={out}: {parent} is a symbolic link to a missing target")
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"Global.output={out}: {parent} is a file, so no folder can be made under it; "
                        "choose another path")
    return parent


def _read_only(folder: str) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _check_room(cfg: Config, folder: str) -> None:
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if st.f_blocks == 0:  # tmpfs without a size or a pseudo file system: no figure to compare with
        return
    if free >= checkpoint_bytes(cfg, COARSE_PARAMS):
        return
    need = checkpoint_bytes(cfg, parameter_count(cfg))
    if free < need:
        raise UserError(f"Global.output={cfg.Global.output}: {folder} has {_mib(free)} free, the checkpoints of this "
                        f"run need about {_mib(need)} ({copies(cfg)} copies of "
                        f"{_mib((need - SLACK_BYTES) // copies(cfg))}: latest, "
                        "best_model, the epoch_N kept and one being written); free space, choose another folder, "
                        "raise Train.save_interval or lower Train.max_epoch_checkpoints")


def copies(cfg: Config) -> int:
    """Checkpoints on disk at most: latest, best_model, the epoch_N kept (one every save_interval, the newest
    Train.max_epoch_checkpoints), one being written."""
    saved = cfg.Train.epochs_iters // cfg.Train.save_interval
    keep = cfg.Train.max_epoch_checkpoints
    return 3 + (saved if keep is None else min(saved, keep))


def checkpoint_bytes(cfg: Config, params: int) -> int:
    """fp32 parameters plus the optimizer's state per parameter (Momentum: velocity; AdamW: two moments), plus
    the exported inference parameters in each folder with Train.uniform_output_enabled."""
    from paddledist.models import model_spec

    slots = 2 if model_spec(cfg.Global.model).cfg.optimizer.name.startswith("AdamW") else 1
    exported = 1 if cfg.Train.uniform_output_enabled else 0  # inference.pdiparams: the parameters again
    return copies(cfg) * 4 * params * (1 + slots + exported) + SLACK_BYTES


def parameter_count(cfg: Config) -> int:
    """The model's parameter count, from a network built under paddle.LazyGuard (no weights allocated, ~0.1 s
    after paddle's import), in its own name scope so the real model's parameter names do not shift."""
    import paddle

    from paddledist.models import build_model
    from paddledist.models.recipe import recipe

    with paddle.utils.unique_name.guard(), paddle.LazyGuard():
        model = build_model(cfg.Global.model, cfg.Train.num_classes, recipe(cfg).input_size)
    return sum(math.prod(p.shape) for p in model.parameters())


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"

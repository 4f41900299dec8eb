"""Which gradient sync a job uses (Train.grad_sync): the choice, and the paddle capabilities each relies on."""

from __future__ import annotations

import os
import platform
from typing import Optional

from paddledist import paddle_internals as internals
from paddledist.config.schema import GRAD_SYNCS
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError

SHM_DIR = "/dev/shm"


NEEDS = {name: way.needs for name, way in GRAD_SYNCS.items()}
"""The paddle_internals capabilities each sync relies on (config/schema.py's GRAD_SYNCS)."""


def choose(mode: str, kind: str, dist: DistEnv, block: int, shm_free: Optional[int], arch: str = "",
           missing=internals.missing) -> str:
    """The sync to use: `mode` unless auto; shm only where one machine holds every rank, the CPU is x86-64 (its
    flags rely on x86's store ordering) and its shared block (`block` bytes) fits twice over in /dev/shm (a block
    that outgrows /dev/shm would end the job with SIGBUS). auto passes over a sync whose paddle capabilities fail
    their probe (`missing(name)` says why); asked for by name, such a sync is a UserError naming the capability."""
    if not dist.distributed:
        return "none"
    machine = arch or platform.machine()
    x86 = machine.lower() in ("x86_64", "amd64")
    fits = shm_free is not None and shm_free >= 2 * block
    if mode == "shm" and not x86:
        raise UserError(f"Train.grad_sync=shm needs an x86-64 CPU, this one is {machine}; "
                        f"use Train.grad_sync=flat or auto")
    if mode == "shm" and not fits:
        raise UserError(f"Train.grad_sync=shm needs {2 * block / 1e6:.0f} MB free in "
                        f"{SHM_DIR}, {(shm_free or 0) / 1e6:.0f} MB are; use Train.grad_sync=flat or auto")
    if mode != "auto":
        failed = internals.failure(NEEDS[mode], missing)
        if failed:
            raise UserError(f"Train.grad_sync={mode} needs {failed}; use Train.grad_sync=auto, which picks a path "
                            f"this paddle supports")
        return mode
    if kind != "cpu":  # gpu and PaddleX's other card kinds: paddle's DataParallel over the card's library
        return "reducer"
    candidates = (["shm"] if dist.nnodes == 1 and fits and x86 else []) + ["bucket", "flat"]
    usable = [c for c in candidates if not internals.failure(NEEDS[c], missing)]
    return usable[0] if usable else "reducer"


def shm_free_bytes(path: str = SHM_DIR) -> Optional[int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize

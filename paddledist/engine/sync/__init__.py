"""Gradient averaging across ranks after backward, in place (the trainer's loss weights assume an average).

Four ways, chosen by Train.grad_sync (policy.py; auto picks per device and job shape): `reducer` (paddle's
DataParallel: the right tool on GPU), `shm` (CPU ranks on one x86-64 machine: a shared-memory block, the
reduction and the Momentum step done by ranks that finish early), `bucket` (paddle's all_reduce from a
background thread during backward: CPU jobs across machines) and `flat` (one all_reduce after backward).
All but the reducer leave the model unwrapped: rank 0's parameters are broadcast once and the sync is called
after the last backward of an update. Every way implements GradSync, all the trainer calls. Measurements and
the why: docs/design_notes.md, "Gradient syncs"."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, ContextManager, Protocol, runtime_checkable

from paddledist import paddle_internals as internals
from paddledist.engine.distenv import DistEnv
from paddledist.engine.sync import reducer
from paddledist.engine.sync.bucket import BucketSync
from paddledist.engine.sync.flat import FlatSync, broadcast_parameters, flat_bounds
from paddledist.engine.sync.none import NoSync
from paddledist.engine.sync.policy import NEEDS, SHM_DIR, choose, shm_free_bytes
from paddledist.engine.sync.shared_step import SharedStep
from paddledist.engine.sync.shm import ShmSync, block_size, shm_sync

__all__ = ["NEEDS", "SHM_DIR", "BucketSync", "FlatSync", "GradSync", "NoSync", "SharedStep", "ShmSync", "block_size",
           "build", "choose", "shm_free_bytes"]

log = logging.getLogger("paddledist")


@runtime_checkable
class GradSync(Protocol):
    """What the trainer calls on a gradient sync, and nothing else."""

    timed: bool
    """Whether the time of __call__ is the time spent communicating."""
    updates: bool
    """Whether __call__ also applies the optimizer's update (the trainer then does not call optimizer.step)."""

    def skip(self) -> ContextManager:
        """Context for a backward whose gradients must not be exchanged yet (accumulation)."""

    def __call__(self) -> None:
        """After the last backward of an update: every rank's gradients are the mean over ranks."""

    def clear(self, optimizer) -> None:
        """After the update: drop the gradients (or, where they live in the sync's buffers, zero them)."""

    def close(self) -> None:
        """At the end of training (or on its failure): stop what the sync started (the bucket sync's thread)."""


def build(mode: str, model, optimizer, kind: str, dist: DistEnv, timeout: float = 60.0, scaler=None,
          bucket_mb: float = 4.0, compression: str = "none"):
    """(model, optimizer, sync): wrapped by fleet for the reducer, else as they are, with rank 0's parameters
    copied to every rank. The shm sync also takes over the optimizer's update where SharedStep supports it."""
    params = [p for p in model.parameters() if not p.stop_gradient]
    nbytes = 4 * int(flat_bounds(params)[-1])
    shared = SharedStep.supports(optimizer, scaler)
    found = {}
    if dist.distributed and kind == "cpu" and mode in ("auto", "bucket"):  # a collective: every rank, before the choice
        found["global_all_reduce"] = internals.check_global_all_reduce(dist.world_size)
    chosen = choose(mode, kind, dist, block_size(params, dist.world_size, shared), shm_free_bytes(),
                    missing=internals.with_job_checks(found))
    if chosen == "none":
        return model, optimizer, NoSync()
    if dist.is_main:
        log.info("gradient sync: %s (Train.grad_sync=%s), %.1f MB of gradients%s%s", chosen, mode, nbytes / 1e6,
                 ", optimizer step shared" if chosen == "shm" and shared else "",
                 f", buckets of {bucket_mb:g} MB, sent as {compression}" if chosen == "bucket" else "")
    if chosen == "reducer":
        return reducer.wrap(model, optimizer)
    broadcast_parameters(model)
    return model, optimizer, MAKERS[chosen](SyncArgs(params, optimizer, dist, timeout, bucket_mb, compression, shared))


@dataclass(frozen=True)
class SyncArgs:
    """What the syncs that leave the model unwrapped are made from."""
    params: list
    optimizer: object
    dist: DistEnv
    timeout: float
    bucket_mb: float
    compression: str
    shared: bool
    """Whether SharedStep takes over the optimizer's update (shm)."""


MAKERS: dict[str, Callable[[SyncArgs], GradSync]] = {
    "shm": lambda a: shm_sync(a.params, a.dist, a.timeout, SharedStep(a.optimizer) if a.shared else None),
    "bucket": lambda a: BucketSync(a.params, a.dist, a.bucket_mb, a.compression, a.timeout),
    "flat": lambda a: FlatSync(a.params, a.dist),
}
"""config/schema.py's GRAD_SYNCS but the reducer (paddle's DataParallel wraps the model instead)."""

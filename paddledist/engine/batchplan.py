"""The global batch kept across world sizes (a restart on fewer machines, a manual resume elsewhere).

An update averages the gradients of one global batch of G consecutive samples of the epoch's permutation,
however they are split into ranks x accumulation x per-rank batch (data/sharding.py). So a run that keeps G
keeps its optimisation: the same samples in every update, the same number of updates per epoch and so the
same learning rate at every sample count. G is `Train.global_batch_size` when set, else the resumed
checkpoint's, else `Train.batch_size` x ranks x `Train.accum_steps` of the first start.

On another rank count: accumulation a = ceil(G / (ranks x batch_size)) and a per-rank batch of
G / (ranks x a), never above the configured one (a device's memory was sized for it). When that is not a
whole number the run stops with the sizes named, unless `Train.elastic_batch: scale_lr` keeps the per-rank
batch and accumulation and scales the learning rate by the new global batch over G.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from paddledist.config.schema import ELASTIC_BATCH
from paddledist.errors import UserError

KEEP, SCALE_LR = ELASTIC_BATCH


@dataclass(frozen=True)
class BatchPlan:
    batch_size: int
    """Per-rank micro-batch."""
    accum_steps: int
    world_size: int
    target: int
    """The global batch the run asked for (G above)."""
    configured_batch: int
    """Train.batch_size as configured: the batch Train.scale_lr's base rate belongs to."""
    lr_factor: float = 1.0
    """Learning-rate multiplier: 1 unless Train.elastic_batch=scale_lr had to give up G."""
    note: str = ""
    """One line for the log when the plan differs from the configuration; "" otherwise."""

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size * self.accum_steps

    def learning_rate(self, base_lr: float, scale_lr: bool) -> float:
        """Train.scale_lr: the base rate belongs to one configured batch, scaled by the global batch (the same
        whatever the split); else the base rate, times lr_factor when scale_lr had to give up the target."""
        return base_lr * self.global_batch / self.configured_batch if scale_lr else base_lr * self.lr_factor


def plan_batch(batch_size: int, accum_steps: int, world_size: int, target: Optional[int],
               elastic: str = KEEP, origin: str = "") -> BatchPlan:
    """Per-rank batch and accumulation for `world_size` ranks that keep the global batch `target` (None: the
    configuration's own). `origin` says where the target came from, for the note and the error."""
    configured = batch_size * world_size * accum_steps
    if target is None or target == configured:
        return BatchPlan(batch_size, accum_steps, world_size, configured, batch_size)
    accum = math.ceil(target / (world_size * batch_size))
    per_rank, rest = divmod(target, world_size * accum)
    where = f"the global batch of {target} samples{f' ({origin})' if origin else ''}"
    if not rest:
        note = (f"keeping {where} on {world_size} rank(s): per-rank batch {per_rank}, accumulation {accum} "
                f"(configured: {batch_size}, {accum_steps})")
        return BatchPlan(per_rank, accum, world_size, target, batch_size, note=note)
    if elastic == SCALE_LR:
        factor = configured / target
        note = (f"Train.elastic_batch=scale_lr: {where} does not split over {world_size} rank(s) at a per-rank "
                f"batch of at most {batch_size}; keeping per-rank batch {batch_size} and accumulation "
                f"{accum_steps} (global batch {configured}) and scaling the learning rate by {factor:g}")
        return BatchPlan(batch_size, accum_steps, world_size, target, batch_size, lr_factor=factor, note=note)
    raise UserError(f"{where} does not split over {world_size} rank(s): accumulation {accum} would need a per-rank "
                    f"batch of {target}/{world_size * accum} = {target / (world_size * accum):g} (at most "
                    f"Train.batch_size={batch_size}); run on a rank count that divides it, set "
                    "Train.global_batch_size, or -o Train.elastic_batch=scale_lr to keep the per-rank batch and scale "
                    "the learning rate")


def target_of(global_batch_size: Optional[int], states: Optional[dict]) -> tuple[Optional[int], str]:
    """The global batch to keep and where it comes from: Train.global_batch_size, else the checkpoint's."""
    if global_batch_size:
        return global_batch_size, "Train.global_batch_size"
    saved = (states or {}).get("global_batch")
    if isinstance(saved, int) and saved > 0:
        return saved, "the resumed checkpoint's"
    return None, ""


def plan_for(cfg, world_size: int, states: Optional[dict] = None) -> BatchPlan:
    """The plan for `cfg` on `world_size` ranks, resuming a checkpoint with .pdstates `states` (or none)."""
    t = cfg.Train
    target, origin = target_of(t.global_batch_size, states)
    return plan_batch(t.batch_size, t.accum_steps, world_size, target, t.elastic_batch, origin)


def applied(cfg, plan: BatchPlan):
    """`cfg` with the plan's per-rank batch and accumulation (what the sampler, the loss and the results read)."""
    train = dataclasses.replace(cfg.Train, batch_size=plan.batch_size, accum_steps=plan.accum_steps)
    return dataclasses.replace(cfg, Train=train)

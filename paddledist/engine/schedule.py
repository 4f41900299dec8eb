"""Pure schedule arithmetic: learning rate per step, linear scaling, update groups, ETA."""

from __future__ import annotations

import math


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Linear warm-up from 0 over `warmup_steps`, then cosine decay to 0 at `total_steps`."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def resume_step(epochs_done: int, updates_per_epoch: int) -> int:
    """Where a resumed schedule continues: the update that `epochs_done` full epochs reach at today's
    updates per epoch (the same fraction of the data seen, whatever the global batch was before)."""
    return epochs_done * updates_per_epoch


def updates_per_epoch(steps_per_epoch: int, accum_steps: int) -> int:
    """Optimizer updates in an epoch of `steps_per_epoch` micro-batches (the last group may be shorter)."""
    return -(-steps_per_epoch // accum_steps)


def piecewise_factor(step: int, warmup_steps: int, boundaries: list) -> float:
    """Linear warm-up from 0 over `warmup_steps`, then x0.1 after each boundary step (PaddleClas's Piecewise)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    return 0.1 ** sum(step >= b for b in boundaries)




def eta_seconds(done_steps: int, total_steps: int, seconds_per_step: float) -> float:
    return max(0, total_steps - done_steps) * seconds_per_step


def format_eta(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def update_group(index: int, accum_steps: int, steps: int) -> range:
    """The micro-batches (indices in the epoch) of the update that micro-batch `index` belongs to: groups of
    `accum_steps` from the epoch's start, the last one shorter when `steps` does not divide evenly."""
    start = index // accum_steps * accum_steps
    return range(start, min(start + accum_steps, steps))


def is_update_step(index: int, accum_steps: int, steps: int) -> bool:
    """Whether micro-batch `index` ends its update (gradients are exchanged and the optimizer steps)."""
    return index + 1 == update_group(index, accum_steps, steps).stop


def steps_left(epoch: int, epochs: int, index: int, steps_per_epoch: int) -> int:
    """Micro-batches still to run after micro-batch `index` (0-based) of `epoch` (1-based) of `epochs`."""
    return (epochs - epoch) * steps_per_epoch + steps_per_epoch - index - 1

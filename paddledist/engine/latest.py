"""Every machine keeps its own `latest`, so losing a machine (the first included) loses no progress.

Every rank holds the same parameters and optimizer state, so each machine's local rank 0 writes `latest` into
its own `Global.output` (a local write, no transfer) at the same steps rank 0 does, unless that folder is rank
0's own (a shared file system: one writer per folder). `best_model`, `epoch_N`, results and exports stay rank 0's.

On `Train.resume_path=auto` the machines compare the step of the `latest` each holds (one small gather) and
start from the newest: every copy is a complete, atomically published state of the same synchronous run, so
the newest loses least; the rank holding it sends it to the others (a machine with none, or an older one,
receives it)."""

from __future__ import annotations

import logging
import os
import secrets
from typing import Optional

from paddledist.engine import checkpoint
from paddledist.engine.distenv import DistEnv, all_gather_object, barrier, broadcast_object
from paddledist.fsio import atomic_write
from paddledist.runfiles.latest import latest_progress

log = logging.getLogger("paddledist")

OWNER = ".paddledist-owner"
"""A token rank 0 writes into its Global.output at start: a machine that reads it back shares that folder."""


def writes_latest(output: str, dist: DistEnv) -> bool:
    """Whether this rank writes a `latest` of its own: rank 0, and each other machine's local rank 0 whose
    Global.output is not rank 0's. A collective: every rank calls it."""
    if not dist.distributed:
        return dist.is_main
    token = broadcast_object(secrets.token_hex(16) if dist.is_main else None, dist)
    if dist.is_main:
        os.makedirs(output, exist_ok=True)
        atomic_write(os.path.join(output, OWNER), token)
    barrier(dist)
    if dist.is_main or dist.local_rank != 0:
        return dist.is_main
    try:
        with open(os.path.join(output, OWNER)) as f:
            shared = f.read(64) == token
    except OSError:
        shared = False
    if shared:
        print(f"paddledist: rank {dist.rank}: Global.output {output} is rank 0's own folder (a shared file system): "
              "rank 0 alone writes latest there", flush=True)
    return not shared


def agree_resume(output: str, dist: DistEnv, resume, auto: bool):
    """The checkpoint every rank starts from: rank 0's `resume` for an explicit Train.resume_path; with auto,
    the newest `latest` any machine holds, sent by the rank that has it. A collective: every rank calls it."""
    if not auto or not dist.distributed:
        return broadcast_object(resume, dist)
    mine = _step_of(resume) if dist.is_main else (_step_of_folder(output) if dist.local_rank == 0 else None)
    steps = all_gather_object(mine, dist)
    held = [(step, rank) for rank, step in enumerate(steps) if step is not None]
    if not held:
        return None
    newest = max(step for step, _ in held)
    source = min(rank for step, rank in held if step == newest)
    if source != 0:
        if dist.rank == source:
            resume = checkpoint.load(os.path.join(output, "latest", "latest.pdparams"), "Train.resume_path")
        if dist.is_main:
            log.info("Train.resume_path=auto: rank %d's latest (epoch %d, step %d of the next) is the newest any "
                     "machine holds (this machine's: %s); resuming from it", source, *newest, _describe(mine))
    return broadcast_object(resume, dist, src=source)


def _step_of(ckpt) -> Optional[tuple[int, int]]:
    if ckpt is None:
        return None
    states = ckpt.states or {}
    return int(states.get("epoch", 0)), int(states.get("step_in_epoch", 0))


def _step_of_folder(output: str) -> Optional[tuple[int, int]]:
    progress = latest_progress(output)
    if progress is None or not os.path.isfile(os.path.join(output, "latest", "latest.pdparams")):
        return None
    return int(progress["epoch"]), int(progress["step_in_epoch"])


def _describe(step: Optional[tuple[int, int]]) -> str:
    return "none" if step is None else f"epoch {step[0]}, step {step[1]}"

"""What a checkpoint holds beyond parameters and optimizer state, written and read in this one place.

`.pdstates` keys: epoch (complete epochs), step_in_epoch (micro-batches of the next, a preemption checkpoint;
0 at an epoch's end) with the accum_steps they were counted in, global_step (optimizer updates), best_top1 and
best_epoch, history, bad_samples, seed, global_batch (engine/batchplan.py keeps it), restarts. `info.json` is
PaddleX's summary of the same."""

from __future__ import annotations

import logging

from paddledist.runfiles import results
from paddledist.engine.trainer import TrainState

log = logging.getLogger("paddledist")


def contents(t, epoch: int, step_in_epoch: int) -> tuple[dict, dict, dict, dict]:
    """params, optimizer state, .pdstates and info.json of a checkpoint after `epoch` complete epochs and
    `step_in_epoch` micro-batches of the next (a preemption checkpoint; 0 at an epoch's end)."""
    s = t.state
    progress = {"epoch": epoch, "step_in_epoch": step_in_epoch, "global_step": s.global_step,
                "accum_steps": t.cfg.Train.accum_steps}  # step_in_epoch / accum_steps: the updates made
    states = {**progress, "metric": s.best_top1, "best_top1": s.best_top1, "best_epoch": s.best_epoch,
              "history": s.history, "bad_samples": s.bad_samples, "seed": t.cfg.Global.seed,
              "global_batch": results.global_batch(t.cfg, t.dist.world_size), "restarts": t.restarts,
              "rng": "reseeded per epoch from (Global.seed, rank, epoch)"}
    last = s.history[-1].get("top1") if s.history else None
    info = {**progress, "metric": last, "best_metric": s.best_top1, "best_epoch": s.best_epoch}
    return t.model.state_dict(), t.optimizer.state_dict(), states, info


def restore(model, optimizer, ckpt, accum_steps: int) -> TrainState:
    """Continue at the epoch after the checkpoint (at its update, for a preemption checkpoint: the preflight
    checked the global batch is the same; its micro-batches are counted again at this run's `accum_steps`),
    keeping the best metric and history."""
    states = ckpt.states or {}
    s = TrainState()
    updates = int(states.get("step_in_epoch", 0)) // int(states.get("accum_steps", accum_steps))
    s.start_epoch, s.start_iter = int(states.get("epoch", 0)) + 1, updates * accum_steps
    model.set_state_dict(ckpt.params)
    if ckpt.opt:
        optimizer.set_state_dict(ckpt.opt)
    s.best_top1, s.best_epoch = float(states.get("best_top1", -1.0)), int(states.get("best_epoch", 0))
    s.history, s.global_step = list(states.get("history", [])), int(states.get("global_step", 0))
    s.bad_samples = list(states.get("bad_samples", []))
    at = f" step {s.start_iter + 1}" if s.start_iter else ""
    log.info("resumed from epoch %d; continuing at epoch %d%s", s.start_epoch - 1, s.start_epoch, at)
    return s

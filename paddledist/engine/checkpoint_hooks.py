"""The hooks that write checkpoints: every epoch's (latest, best_model, epoch_N, with inference/) and a
preemption's (latest at the step). Rank 0 writes Global.output; another machine's local rank 0 its own latest."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
from typing import Callable, Optional

import numpy as np

from paddledist import paddle_internals as internals
from paddledist.engine import checkpoint
from paddledist.runfiles import results
from paddledist.engine.distenv import all_reduce_sum, barrier
from paddledist.engine.schedule import is_update_step
from paddledist.engine.snapshot import contents
from paddledist.engine.trainer import Hook, Preempted

log = logging.getLogger("paddledist")

Exporter = Callable[..., None]
"""export(model, folder, weight_path): the inference program, its parameters and inference.yml into folder."""


class CheckpointHook(Hook):
    """latest every epoch, best_model on a new best, epoch_N every save_interval (the newest
    Train.max_epoch_checkpoints kept); rank 0, atomically. Each
    folder also gets `<name>.info.json` and, with Train.uniform_output_enabled, an exported `inference/`
    (traced once per epoch and copied into each folder), as PaddleX's trainer writes them. `own_latest`: this
    rank, not rank 0, writes its machine's own `latest` (engine/latest.py). `export(model, folder, weight_path)`
    writes an inference model (the train stage hands in the export stage's writer; None: no inference/)."""

    def __init__(self, own_latest: bool = False, export: Optional[Exporter] = None) -> None:
        self.own_latest, self.export = own_latest, export

    def after_epoch(self, t) -> None:
        if self.own_latest and not t.dist.is_main:
            save_latest(t, t.state.epoch, 0)
        if not t.dist.is_main:
            return
        out, s = t.cfg.Global.output, t.state
        params, opt, states, info = contents(t, s.epoch, 0)
        with uniform_output(t, self.export) as inference:
            extra = functools.partial(_add_info_and_inference, info=info, inference=inference)
            checkpoint.save(out, "latest", params, opt, states, link=True, extra=extra)
            if s.is_best:
                best = dict(info, metric=s.best_top1)
                checkpoint.save(out, "best_model", params, opt, states, link=True,
                                extra=functools.partial(_add_info_and_inference, info=best, inference=inference))
            if s.epoch % t.cfg.Train.save_interval == 0:
                checkpoint.save(out, f"epoch_{s.epoch}", params, opt, states, link=False, extra=extra)
                checkpoint.prune_epochs(out, s.epoch, t.cfg.Train.max_epoch_checkpoints)


class PreemptHook(Hook):
    """Preemption (launch/control.py): after each update but an epoch's last, the ranks agree through one
    all-reduce whether any supervisor asked them to stop (its `flag` file exists); if so rank 0 saves latest
    at this step, every rank waits for it, marks `saved` and raises Preempted. Measured on two CPU ranks: the
    check costs about 0.4 ms a step (gloo, one machine) and a stat call 2 us (docs/multi_machine.md, "Preemption")."""

    def __init__(self, flag: str, saved: str, own_latest: bool = False) -> None:
        self.flag, self.saved, self.own_latest = flag, saved, own_latest

    def after_step(self, t) -> None:
        n = len(t.global_counts)
        if t.iter + 1 >= n or not is_update_step(t.iter, t.cfg.Train.accum_steps, n):
            return  # mid-update the accumulated gradients would be lost; an epoch's end saves on its own
        asked = float(os.path.exists(self.flag))
        if all_reduce_sum(np.array([asked]), t.dist)[0] == 0:
            return
        if t.dist.is_main or self.own_latest:
            save_latest(t, t.state.epoch - 1, t.iter + 1)
        if t.dist.is_main:
            results.write_train_result(t, done=False)
            log.info("preempted: saved latest at epoch %d step %d/%d", t.state.epoch, t.iter + 1, n)
        barrier(t.dist)  # no rank leaves (and lets the launcher end the others) before every latest is saved
        open(self.saved, "a").close()
        raise Preempted(f"epoch {t.state.epoch} step {t.iter + 1}")


def save_latest(t, epoch: int, step_in_epoch: int) -> None:
    """`latest` alone, without inference/ (another machine's own copy, or a preemption's mid-epoch save)."""
    params, opt, states, info = contents(t, epoch, step_in_epoch)
    checkpoint.save(t.cfg.Global.output, "latest", params, opt, states, link=True,
                    extra=functools.partial(_add_info_and_inference, info=info, inference=None))


def _add_info_and_inference(folder: str, name: str, info: dict, inference) -> None:
    results.write_json(os.path.join(folder, f"{name}.info.json"), info)
    if inference:
        shutil.copytree(inference, os.path.join(folder, "inference"))


@contextlib.contextmanager
def uniform_output(t, export: Optional[Exporter]):
    """The inference model of this epoch's weights in a scratch folder (None without an exporter)."""
    if export is None:
        yield None
        return
    # not under checkpoint.STORE: every save there removes what no link points to
    scratch = os.path.join(t.cfg.Global.output, f".inference-scratch-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    model = internals.unwrap(t.model)
    try:
        export(model, scratch, f"epoch {t.state.epoch}")
        model.train()  # tracing switched it to eval
        yield scratch
    finally:
        model.train()
        shutil.rmtree(scratch, ignore_errors=True)

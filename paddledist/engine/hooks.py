"""Hooks around the loop: logging, evaluation, results, digests, VisualDL, progress (checkpoints:
checkpoint_hooks.py). The trainer calls them in list order; the evaluation hook is the one writer of the
state's metrics (best_top1, best_epoch, history), so it comes before the hooks that read them."""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Optional

import numpy as np

from paddledist.runfiles import results
from paddledist.engine.distenv import all_gather_object, all_reduce_sum, barrier
from paddledist.errors import UserError
from paddledist.engine.metrics import evaluate
from paddledist.engine.schedule import eta_seconds, format_eta, steps_left
from paddledist.engine.trainer import Hook
from paddledist.runfiles.results import VDL_LOG

log = logging.getLogger("paddledist")


class LogHook(Hook):
    """Every log_interval steps: loss, LR, global and per-card images/s, data-wait and communication shares
    (of the wall time, averaged over ranks), ETA."""

    def before_epoch(self, t) -> None:
        self._reset()

    def _reset(self) -> None:
        self.window = np.zeros(5)  # loss sum, samples, data wait, gradient sync, steps
        self.window_start = time.perf_counter()

    def after_step(self, t) -> None:
        self.window += [t.step_stats["loss"], t.step_stats["samples"], t.data_wait, t.comm_time, 1]
        if (t.iter + 1) % t.cfg.Train.log_interval and t.iter + 1 != len(t.global_counts):
            return
        elapsed = time.perf_counter() - self.window_start
        loss, samples, wait, comm, steps = all_reduce_sum(np.append(self.window, elapsed), t.dist)[:5]
        world, busy = t.dist.world_size, t.dist.world_size * max(elapsed, 1e-9)
        left = steps_left(t.state.epoch, t.cfg.Train.epochs_iters, t.iter, len(t.global_counts))
        rate = samples / max(elapsed, 1e-9)
        log.info("epoch %d/%d iter %d/%d loss %.4f lr %.5f ips %.1f (%.1f/card) data_wait %.0f%%%s eta %s",
                 t.state.epoch, t.cfg.Train.epochs_iters, t.iter + 1, len(t.global_counts), loss / steps,
                 t.optimizer.get_lr(), rate, rate / world, 100 * wait / busy, _comm_text(t, comm / busy),
                 format_eta(eta_seconds(0, left, elapsed / max(steps / world, 1))))
        self._reset()


def _comm_text(t, share: float) -> str:
    if not t.dist.distributed:
        return ""
    return f" comm {100 * share:.0f}%" if t.grad_sync.timed else " comm (inside backward)"


class DataErrorHook(Hook):
    """After every epoch: the undecodable training images of all ranks, merged on every rank, logged (they
    were left out with zero weight, never replaced), and the job stopped on all ranks at once past
    Train.max_bad_samples."""

    def after_epoch(self, t) -> None:
        merged = list(dict.fromkeys(name for names in all_gather_object(t.state.bad_samples, t.dist) for name in names))
        t.state.bad_samples = merged
        limit = t.cfg.Train.max_bad_samples
        if len(merged) > limit:
            raise UserError(f"{len(merged)} training images failed to decode (Train.max_bad_samples={limit}): "
                            f"{'; '.join(merged[:20])}; fix or remove them (tools/check_dataset.py lists them all)")
        if merged:
            log.warning("%d training image(s) could not be decoded and were left out, not replaced (Train."
                        "max_bad_samples=%d): %s", len(merged), limit, "; ".join(merged[:20]))


class EvalHook(Hook):
    """Evaluate every eval_interval epochs and after the last; keep history and the best top-1."""

    def __init__(self, val_loader) -> None:
        self.val_loader = val_loader

    def after_epoch(self, t) -> None:
        s, last = t.state, t.state.epoch == t.cfg.Train.epochs_iters
        elapsed = time.perf_counter() - t.epoch_start
        loss_sum, steps, samples, _ = all_reduce_sum(t.epoch_meter, t.dist)
        entry = {"epoch": s.epoch, "train_loss": round(loss_sum / max(steps, 1), 6),
                 "images_per_sec": round(samples / max(elapsed, 1e-9), 2), "lr": t.optimizer.get_lr(),
                 "machines": machine_rates(t, elapsed)}
        if s.epoch % t.cfg.Train.eval_interval == 0 or last:
            m = evaluate(t.model, self.val_loader, t.dist, confusion=last)
            t.confusion = m.get("confusion", t.confusion)
            entry.update(top1=round(m["top1"], 6), top5=round(m["top5"], 6), val_loss=round(m["loss"], 6),
                         val_samples=m["num_samples"])
            if m["undecodable"]:
                entry["val_undecodable"] = m["undecodable"]
                log.warning("%d validation image(s) could not be decoded and were left out of the metrics",
                            m["undecodable"])
            if m["top1"] > s.best_top1:
                s.best_top1, s.best_epoch = m["top1"], s.epoch
            log.info("eval epoch %d: top1 %.4f top5 %.4f loss %.4f on %d samples%s", s.epoch, m["top1"], m["top5"],
                     m["loss"], m["num_samples"], " (best)" if s.is_best else "")
        s.history.append(entry)


def machine_rates(t, elapsed: float) -> list[dict]:
    """Per machine this epoch: its address, NIC and device as its supervisor planned them, its ranks, images/s
    and the share of its ranks' time spent waiting for data (one small gather; rank order is node-major)."""
    mine = (t.machine.get("host", "local"), t.machine.get("nic", ""), t.machine.get("device", ""),
            float(t.epoch_meter[2]), float(t.epoch_meter[3]))
    machines: dict = {}
    for rank, (host, nic, device, samples, wait) in enumerate(all_gather_object(mine, t.dist)):
        m = machines.setdefault(host, {"host": host, "nic": nic, "device": device, "ranks": [], "samples": 0.0,
                                       "wait": 0.0})
        m["ranks"].append(rank)
        m["samples"] += samples
        m["wait"] += wait
    seconds = max(elapsed, 1e-9)
    return [{"host": m["host"], "nic": m["nic"], "device": m["device"], "ranks": m["ranks"],
             "images_per_sec": round(m["samples"] / seconds, 2),
             "data_wait": round(m["wait"] / (seconds * len(m["ranks"])), 4)} for m in machines.values()]


class ResultHook(Hook):
    """train_result.json after every epoch (done_flag false) and at the end (true), then `finish(output)` (the
    train stage's: the run's report.html)."""

    def __init__(self, finish: Optional[Callable[[str], None]] = None) -> None:
        self.finish = finish

    def after_epoch(self, t) -> None:
        if t.dist.is_main:
            results.write_train_result(t, done=False)

    def after_train(self, t) -> None:
        if t.dist.is_main:
            results.write_train_result(t, done=True)
            if self.finish:
                self.finish(t.cfg.Global.output)


class DigestHook(Hook):
    """Logs a digest of the final parameters on every rank: identical digests prove the ranks stayed in sync."""

    def after_train(self, t) -> None:
        import hashlib

        digest = hashlib.sha256()
        for name, value in sorted(t.model.state_dict().items()):
            digest.update(name.encode())
            digest.update(value.numpy().tobytes())
        log.info("final parameter digest: %s", digest.hexdigest())


class VisualDLHook(Hook):
    """Scalars for VisualDL under `<Global.output>/vdl_log` (PaddleX's place), from rank 0: train loss and lr
    every step, images/s and the evaluation's top-1, top-5 and loss every epoch. Train.visualdl null: on when
    the `visualdl` package is installed (the `vdl` extra); true without it: one line saying how, and training
    goes on; false: off."""

    def __init__(self, output: str, wanted: Optional[bool], is_main: bool) -> None:
        self.writer = None
        if not is_main or wanted is False:
            return
        try:
            from visualdl import LogWriter
        except ImportError:
            if wanted:
                log.warning("Train.visualdl: VisualDL is not installed, so no vdl_log is written: "
                            "pip install \"paddledist[vdl]\" (training goes on)")
            return
        self.writer = LogWriter(logdir=os.path.join(output, VDL_LOG))

    def after_step(self, t) -> None:
        if self.writer:
            self.writer.add_scalar("train/loss", t.step_stats["loss"], t.state.global_step)
            self.writer.add_scalar("train/lr", t.optimizer.get_lr(), t.state.global_step)

    def after_epoch(self, t) -> None:
        entry = t.state.history[-1] if self.writer and t.state.history else {}
        for tag, key in (("train/images_per_sec", "images_per_sec"), ("eval/top1", "top1"), ("eval/top5", "top5"),
                         ("eval/loss", "val_loss")):
            if key in entry:
                self.writer.add_scalar(tag, entry[key], t.state.epoch)

    def after_train(self, t) -> None:
        if self.writer:
            self.writer.close()


class ProgressHook(Hook):
    """Step progress for the supervisor's stall watchdog (runfiles/progress.py), placed first among the hooks:
    a report after each step; the end of an epoch (evaluation, checkpoints) is reported busy until the
    EpochBarrierHook that closes it lets every rank go on together."""

    def __init__(self, progress) -> None:
        self.progress = progress
        self.stepped = False
        """The first report comes after the first step: start-up and compilation are not counted."""

    def before_epoch(self, t) -> None:
        if self.stepped:
            self.progress.beat(f"the start of epoch {t.state.epoch}")

    def after_step(self, t) -> None:
        self.stepped = True
        self.progress.beat(f"after epoch {t.state.epoch} step {t.iter + 1}/{len(t.global_counts)}")

    def after_epoch(self, t) -> None:
        self.progress.beat(f"the end of epoch {t.state.epoch} (evaluation and checkpoints)", busy=True)


class EpochBarrierHook(Hook):
    """Placed last: no rank starts the next epoch's steps (whose first collective would wait, not busy, for rank
    0's checkpoint writing) before every rank has ended this one."""

    def after_epoch(self, t) -> None:
        barrier(t.dist)

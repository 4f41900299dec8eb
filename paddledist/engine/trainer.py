"""The training loop and its state. Hooks (hooks.py, checkpoint_hooks.py) do logging, evaluation, checkpoints,
results.

The trainer never starts processes and never reads paddle's environment variables: it gets a
`DistEnv`. Gradients are averaged across ranks by `grad_sync` (engine/sync/): after the last backward of an
update, or inside backward when it is paddle's reducer.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Optional
from dataclasses import dataclass, field

import numpy as np
import paddle
import paddle.nn.functional as F

from paddledist.data.pipeline import BAD, OK
from paddledist.engine.sync import GradSync, NoSync
from paddledist.engine.schedule import is_update_step, update_group


class Preempted(Exception):
    """Raised by the preemption hook once every rank saved at the same step: the worker exits 0, cleanly."""


class Hook:
    """Called by the trainer around the loop; every method is a no-op, a hook overrides what it needs."""

    def before_train(self, t: "Trainer") -> None: ...

    def before_epoch(self, t: "Trainer") -> None: ...

    def after_step(self, t: "Trainer") -> None: ...

    def after_epoch(self, t: "Trainer") -> None: ...

    def after_train(self, t: "Trainer") -> None: ...


@dataclass
class TrainState:
    epoch: int = 1
    """Epoch being trained (1-based)."""
    start_epoch: int = 1
    start_iter: int = 0
    """Micro-batches of start_epoch already trained (a resume from a preemption checkpoint), else 0."""
    global_step: int = 0
    best_top1: float = -1.0
    best_epoch: int = 0
    history: list = field(default_factory=list)
    bad_samples: list = field(default_factory=list)

    @property
    def is_best(self) -> bool:
        """This epoch's evaluation set the best top-1 so far (false for an epoch that was not evaluated)."""
        return self.best_epoch == self.epoch and self.best_epoch > 0


class Trainer:
    def __init__(self, cfg, dist, model, optimizer, scheduler, loader, sampler, hooks, scaler=None,
                 grad_sync: "GradSync | None" = None) -> None:
        self.cfg, self.dist = cfg, dist
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.loader, self.sampler, self.hooks = loader, sampler, hooks
        self.grad_sync: GradSync = grad_sync or NoSync(model if dist.distributed else None)
        self.state = TrainState()
        # What the hooks read, set by the loop: every attribute exists from the start.
        self.step_stats: dict = {}
        self.iter = 0
        """Index of the current micro-batch in the epoch."""
        self.global_counts: list[int] = []
        """Real samples of each micro-batch of this epoch summed over ranks (the loss weights' denominators)."""
        self.epoch_meter = np.zeros(4)
        """This epoch's loss sum, steps, samples and seconds waited for data on this rank."""
        self.epoch_start = 0.0
        self.data_wait = 0.0
        """Seconds the loop waited for the current batch."""
        self.comm_time = 0.0
        """Seconds of the current step's gradient exchange (0 when it did not exchange)."""
        self.inference_pir: Optional[bool] = None
        """Whether the checkpoints' inference/ holds a PIR program (json) or the legacy one; None: no inference/."""
        self.restarts: list = []
        """The supervisor's restarts of this job so far ({"cause", "epoch"}), for train_result.json."""
        self.machine: dict = {}
        """This machine as its supervisor planned it ({"host", "nic", "device"}; {} without one), for the report."""
        self.confusion: list = []
        """[label, predicted, count] of the last evaluation that counted them (the last epoch's), for the report."""

    def train(self) -> None:
        try:
            self._epochs()
        finally:
            self.grad_sync.close()  # the bucket sync's sending thread

    def _epochs(self) -> None:
        self._call("before_train")
        for epoch in range(self.state.start_epoch, self.cfg.Train.epochs_iters + 1):
            self.state.epoch = epoch
            self._seed_epoch(epoch)
            skip = self.state.start_iter if epoch == self.state.start_epoch else 0
            self.sampler.set_epoch(epoch, skip)
            self.global_counts = [b.global_count for b in self.sampler.batches()]
            self.epoch_meter, self.epoch_start = np.zeros(4), time.perf_counter()
            self._call("before_epoch")
            for self.iter, batch in enumerate(self._timed(self.loader), start=skip):
                self.run_step(batch)
                self._call("after_step")
            self._call("after_epoch")
        self._call("after_train")

    def run_step(self, batch) -> None:
        images, labels, status, index = batch
        accum = self.cfg.Train.accum_steps
        last_micro = is_update_step(self.iter, accum, len(self.global_counts))
        weight = self._loss_weights(status)
        with contextlib.nullcontext() if last_micro else self.grad_sync.skip():
            with paddle.amp.auto_cast(enable=self.scaler is not None):
                logits = self.model(images)
                loss = (F.cross_entropy(logits, labels, reduction="none").reshape([-1]) * weight).sum()
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        self.comm_time = 0.0
        if last_micro:
            start = time.perf_counter()
            self.grad_sync()
            self.comm_time = time.perf_counter() - start
            self._optimizer_step()
        self._note_bad(status, index)
        group = update_group(self.iter, accum, len(self.global_counts))
        share = self.global_counts[self.iter] / sum(self.global_counts[group.start:group.stop])
        self.step_stats = {"loss": float(loss) / share, "samples": int((status == OK).sum())}
        self.epoch_meter[:3] += [self.step_stats["loss"], 1, self.step_stats["samples"]]

    def _loss_weights(self, status: paddle.Tensor) -> paddle.Tensor:
        # Sum of loss * world / (real samples in this update across ranks and accumulated micro-batches);
        # grad_sync averages gradients over ranks, so the update follows the exact mean over the global batch.
        group = update_group(self.iter, self.cfg.Train.accum_steps, len(self.global_counts))
        scale = self.dist.world_size / sum(self.global_counts[group.start:group.stop])
        return (status == OK).astype("float32") * scale

    def _optimizer_step(self) -> None:
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif not self.grad_sync.updates:  # the shm sync applies the update while it exchanges gradients
            self.optimizer.step()
        self.grad_sync.clear(self.optimizer)  # dropped, or zeroed where they live in the sync's buckets
        self.scheduler.step()
        self.state.global_step += 1

    def _note_bad(self, status, index) -> None:
        """Count undecodable samples (distinct: a broken image comes back every epoch). The limit is checked
        at the epoch's end on all ranks at once (DataErrorHook): one rank stopping alone would break the
        others' collectives and hide the reason."""
        bad = (status == BAD).numpy()
        if bad.any():
            names = self.loader.dataset.samples.names
            new = dict.fromkeys(names[i] for i in index.numpy()[bad] if names[i] not in self.state.bad_samples)
            self.state.bad_samples += list(new)

    def _timed(self, loader):
        """Yields batches, recording how long the loop waited for each (the data-wait share)."""
        iterator = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.data_wait = time.perf_counter() - start
            self.epoch_meter[3] += self.data_wait
            yield batch

    def _seed_epoch(self, epoch: int) -> None:
        # RNG is a pure function of (seed, rank, epoch): resuming at epoch k reproduces the same streams.
        seed = self.cfg.Global.seed * 1000 + self.dist.rank * 100_003 + epoch
        random.seed(seed)
        np.random.seed(seed % (2**32))
        paddle.seed(seed)

    def _call(self, event: str) -> None:
        for hook in self.hooks:
            getattr(hook, event)(self)

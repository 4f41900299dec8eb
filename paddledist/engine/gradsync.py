"""Gradient averaging across ranks after backward, in place (the trainer's loss weights assume an average).

Three ways, chosen by Train.grad_sync (auto picks per device and job shape):

  reducer  paddle's DataParallel (fleet.distributed_model): bucketed all-reduces overlapped with backward.
           The right tool on GPU with NCCL. On CPU with gloo it measured slow (benchmarks/, docs/benchmarks.md):
           ResNet18 at batch 32 ran backward ~110 ms slower under the wrapper than without it, even under no_sync.
  shm      CPU ranks on one machine: each copies its gradients into its slot of one shared-memory block, sums a
           1/L slice of all slots into a result area, and copies the whole result back; two barriers per step.
           Memory passes only: ~3x less time than a gloo all-reduce over loopback.
  flat     one gloo (or NCCL) all_reduce of a persistent flat buffer: CPU jobs across machines.

shm and flat leave the model unwrapped: the caller broadcasts rank 0's parameters once (broadcast_parameters)
and calls the sync after the last backward of an update. All ranks end with bit-identical gradients.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import platform
import tempfile
import time
from typing import Optional

import numpy as np
import paddle
import paddle.distributed as pdist

from paddledist.engine.distenv import DistEnv, barrier, broadcast_object
from paddledist.errors import UserError

log = logging.getLogger("paddledist")

SHM_DIR = "/dev/shm"


def choose(mode: str, kind: str, dist: DistEnv, nbytes: int, shm_free: Optional[int]) -> str:
    """The sync to use: `mode` unless auto; shm only where one machine holds every rank and the block fits
    twice over in /dev/shm (a block that outgrows /dev/shm would end the job with SIGBUS)."""
    if not dist.distributed:
        return "none"
    fits = shm_free is not None and shm_free >= 2 * (dist.world_size + 1) * nbytes
    if mode == "shm" and not fits:
        raise UserError(f"Train.grad_sync=shm needs {2 * (dist.world_size + 1) * nbytes / 1e6:.0f} MB free in "
                        f"{SHM_DIR}, {(shm_free or 0) / 1e6:.0f} MB are; use Train.grad_sync=flat or auto")
    if mode != "auto":
        return mode
    if kind == "gpu":
        return "reducer"
    return "shm" if dist.nnodes == 1 and fits else "flat"


def shm_free_bytes(path: str = SHM_DIR) -> Optional[int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class NoSync:
    """One process, or paddle's reducer (which syncs inside backward): nothing to do after backward."""

    timed = False
    """Whether the time of __call__ is the time spent communicating."""

    def __init__(self, model=None) -> None:
        self.model = model

    def skip(self):
        """Context for a backward whose gradients must not be synchronised yet (accumulation)."""
        return self.model.no_sync() if self.model is not None else contextlib.nullcontext()

    def __call__(self) -> None:
        pass


class _Flat:
    """Shared parts: the trainable parameters in a fixed order and numpy views of their gradients."""

    timed = True

    def __init__(self, params, dist: DistEnv) -> None:
        self.params = [p for p in params if not p.stop_gradient]
        self.total = sum(int(np.prod(p.shape)) for p in self.params)
        self.dist = dist

    def skip(self):
        return contextlib.nullcontext()  # gradients only meet in __call__

    def grad_views(self) -> list[np.ndarray]:
        for p in self.params:
            if p.grad is None:  # unused in this step here, maybe not elsewhere: contribute zeros
                p._copy_gradient_from(paddle.zeros_like(p))
        return [np.from_dlpack(p.grad.detach()).reshape(-1) for p in self.params]

    def gather(self, views, out: np.ndarray) -> None:
        offset = 0
        for v in views:
            out[offset:offset + v.size] = v
            offset += v.size

    def scatter_mean(self, total: np.ndarray, views) -> None:
        """The gradients back from the flat sum over ranks, divided by the world size on the way (one pass)."""
        scale, offset = np.float32(1.0 / self.dist.world_size), 0
        for v in views:
            np.multiply(total[offset:offset + v.size], scale, out=v)
            offset += v.size


class FlatSync(_Flat):
    """One all_reduce of a persistent flat buffer; copies in and out through numpy views (no allocation)."""

    def __init__(self, params, dist: DistEnv) -> None:
        super().__init__(params, dist)
        self.buffer = paddle.zeros([self.total], dtype="float32")
        self.array = np.from_dlpack(self.buffer)

    def __call__(self) -> None:
        views = self.grad_views()
        self.gather(views, self.array)
        pdist.all_reduce(self.buffer)
        self.scatter_mean(self.array, views)


class ShmSync(_Flat):
    """All ranks on this machine: one shared-memory block with a flag per rank, slots 0..L-1 (one per rank) and
    a result area.

    Step: copy my gradients into my slot; barrier; sum my slice of every slot into the result area; barrier;
    copy the whole result back, scaled by 1/L on the way (one pass fewer than scaling in place). The result
    area is apart from the slots, so the next step's copy-in cannot overwrite a result another rank is still reading (it passes the next first barrier only
    after every rank finished its copy-out).

    The barriers spin on the flags (yielding the core to anything else runnable) instead of sleeping in gloo:
    on the measured VM a rank that slept at each barrier gave up its core and came back slower, 0.83 of the
    independent-process rate against 0.88 spinning (median of 5 interleaved runs each). Spinning on plain
    stores relies on x86's ordering of stores; elsewhere the barriers are gloo's. A rank that does not arrive
    within `timeout` seconds (Train.heartbeat_timeout) ends this one with its rank named, as gloo's own
    timeout would; a rank that died is noticed sooner by the supervisor, which ends them all."""

    HEADER = 4096
    """Bytes before the slots: one int64 flag per rank, 64 bytes apart (a cache line each)."""

    def __init__(self, params, dist: DistEnv, timeout: float = 60.0) -> None:
        super().__init__(params, dist)
        world, self.timeout = dist.world_size, timeout
        size = self.HEADER + (world + 1) * self.total * 4
        name = None
        if dist.is_main:
            fd, name = tempfile.mkstemp(prefix="paddledist-grads-", dir=SHM_DIR)
            os.ftruncate(fd, size)  # zero-filled: every flag starts at 0
            os.close(fd)
        name = broadcast_object(name, dist)
        with open(name, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), size)
        barrier(dist)
        if dist.is_main:
            os.unlink(name)  # every rank holds a mapping; nothing is left behind if a rank dies later
        self.flags = np.frombuffer(self._map, dtype=np.int64, count=8 * world).reshape(world, 8)[:, 0]
        self.block = np.frombuffer(self._map, dtype=np.float32, offset=self.HEADER).reshape(world + 1, self.total)
        bounds = np.linspace(0, self.total, world + 1).astype(int) // 16 * 16
        bounds[-1] = self.total
        self.lo, self.hi = int(bounds[dist.rank]), int(bounds[dist.rank + 1])
        self.arrivals = 0
        self.spin = platform.machine().lower() in ("x86_64", "amd64")

    def __call__(self) -> None:
        views, world = self.grad_views(), self.dist.world_size
        self.gather(views, self.block[self.dist.rank])
        self.barrier()
        out = self.block[world, self.lo:self.hi]
        np.add(self.block[0, self.lo:self.hi], self.block[1, self.lo:self.hi], out=out)
        for r in range(2, world):
            out += self.block[r, self.lo:self.hi]
        self.barrier()
        self.scatter_mean(self.block[world], views)

    def barrier(self) -> None:
        if not self.spin:
            return barrier(self.dist)
        self.arrivals += 1
        self.flags[self.dist.rank] = self.arrivals  # after this rank's writes to the block (x86: stores in order)
        deadline = time.monotonic() + self.timeout
        while self.flags.min() < self.arrivals:
            os.sched_yield()
            if time.monotonic() > deadline:
                late = [int(r) for r in np.flatnonzero(self.flags < self.arrivals)]
                raise RuntimeError(f"gradient sync: rank(s) {late} did not reach step {(self.arrivals + 1) // 2}'s "
                                   f"gradient exchange within {self.timeout:g} s (Train.heartbeat_timeout)")


def build(mode: str, model, optimizer, kind: str, dist: DistEnv, timeout: float = 60.0):
    """(model, optimizer, sync): wrapped by fleet for the reducer, else as they are, with rank 0's parameters
    copied to every rank."""
    params = [p for p in model.parameters() if not p.stop_gradient]
    nbytes = 4 * sum(int(np.prod(p.shape)) for p in params)
    chosen = choose(mode, kind, dist, nbytes, shm_free_bytes())
    if chosen == "none":
        return model, optimizer, NoSync()
    if dist.is_main:
        log.info("gradient sync: %s (Train.grad_sync=%s), %.1f MB of gradients", chosen, mode, nbytes / 1e6)
    if chosen == "reducer":
        from paddle.distributed import fleet

        model, optimizer = fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)
        return model, optimizer, NoSync(model)
    broadcast_parameters(model)
    return model, optimizer, (ShmSync(params, dist, timeout) if chosen == "shm" else FlatSync(params, dist))


def broadcast_parameters(model) -> None:
    """Rank 0's parameters and buffers (BatchNorm statistics) on every rank, as the reducer does at wrap time."""
    with paddle.no_grad():
        for tensor in model.state_dict().values():
            pdist.broadcast(tensor, src=0)

"""Gradient averaging across ranks after backward, in place (the trainer's loss weights assume an average).

Four ways, chosen by Train.grad_sync (auto picks per device and job shape):

  reducer  paddle's DataParallel (fleet.distributed_model): bucketed all-reduces overlapped with backward.
           The right tool on GPU with NCCL. On CPU with gloo it measured slow (benchmarks/, docs/benchmarks.md):
           ResNet18 at batch 32 ran backward ~110 ms slower under the wrapper than without it, even under no_sync.
  shm      CPU ranks on one x86-64 machine: each copies a gradient into its slot of one shared-memory block as
           backward finishes it; ranks done early sum the mean while the last is still in backward, and apply
           the optimizer's Momentum update to parameters all ranks share in the block (SharedStep), or else
           the optimizer reads the mean in place. Memory passes only: ~3x less time than a gloo all-reduce
           over loopback, and mostly hidden in the wait for the slowest rank.
  bucket   paddle's all_reduce in buckets from a background thread while backward runs (bucketsync.py),
           optionally in bf16 (Train.grad_compression): CPU jobs across machines.
  flat     one gloo all_reduce of a persistent flat buffer after backward (no overlap).

shm, bucket and flat leave the model unwrapped: the caller broadcasts rank 0's parameters once (broadcast_parameters)
and calls the sync after the last backward of an update. All ranks end with bit-identical gradients, or with
the shared step, with the one updated set of parameters (the trainer then skips optimizer.step).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
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

from paddledist import paddle_internals as internals
from paddledist.engine.bucketsync import BucketSync, flag
from paddledist.engine.distenv import DistEnv, barrier, broadcast_object
from paddledist.errors import UserError

log = logging.getLogger("paddledist")

SHM_DIR = "/dev/shm"


NEEDS = {"shm": ("numpy_view", "grad_hook", "give_grad", "share_buffer"),
         "bucket": ("numpy_view", "grad_hook", "give_grad", "global_all_reduce"),
         "flat": ("numpy_view", "give_grad"), "reducer": ()}
"""The paddle_internals capabilities each sync relies on (the reducer is paddle's public fleet API)."""


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


class NoSync:
    """One process, or paddle's reducer (which syncs inside backward): nothing to do after backward."""

    timed = False
    """Whether the time of __call__ is the time spent communicating."""
    updates = False
    """Whether __call__ also applies the optimizer's update (the trainer then does not call optimizer.step)."""

    def __init__(self, model=None) -> None:
        self.model = model

    def skip(self):
        """Context for a backward whose gradients must not be synchronised yet (accumulation)."""
        return self.model.no_sync() if self.model is not None else contextlib.nullcontext()

    def __call__(self) -> None:
        pass


class _Flat:
    """Shared parts: the trainable parameters in a fixed order, and where each lies in a flat buffer of all."""

    timed, updates = True, False

    def __init__(self, params, dist: DistEnv) -> None:
        self.params = [p for p in params if not p.stop_gradient]
        self.bounds = flat_bounds(self.params)
        """Parameter k lies at [bounds[k], bounds[k + 1]) of a flat buffer."""
        self.total = int(self.bounds[-1])
        self.dist = dist

    def skip(self):
        return contextlib.nullcontext()  # gradients only meet in __call__


class FlatSync(_Flat):
    """One all_reduce of a persistent flat buffer; copies in and out through numpy views (no allocation)."""

    def __init__(self, params, dist: DistEnv) -> None:
        super().__init__(params, dist)
        self.buffer = paddle.zeros([self.total], dtype="float32")
        self.array = internals.numpy_view(self.buffer)

    def __call__(self) -> None:
        views = self.grad_views()
        for v, a, b in zip(views, self.bounds[:-1], self.bounds[1:]):
            self.array[a:b] = v
        pdist.all_reduce(self.buffer)
        scale = np.float32(1.0 / self.dist.world_size)  # the mean, written back in one pass
        for v, a, b in zip(views, self.bounds[:-1], self.bounds[1:]):
            np.multiply(self.array[a:b], scale, out=v)

    def grad_views(self) -> list[np.ndarray]:
        for p in self.params:
            internals.ensure_grad(p)  # unused in this step here, maybe not elsewhere: contribute zeros
        return [internals.numpy_view(p.grad.detach()).reshape(-1) for p in self.params]


class ShmSync(_Flat):
    """All ranks on this machine: one shared-memory block of flags, slots 0..L-1 (one per rank) and a result area,
    and with a `SharedStep`, the parameters and the optimizer's velocities too.

    Each rank copies a parameter's gradient into its slot the moment backward has finished it (a backward hook,
    as paddle's own sharding optimizer overlaps its communication), and marks it ready. A rank done with its
    backward takes pieces of the result (1 MiB each) as soon as every rank has marked their parameter ready, and
    sums the mean over all slots into it; with a SharedStep it then applies the optimizer's update to that piece
    of the shared parameters, once for all ranks. So the ranks that finish early do the reduction and the update
    while the last one is still in backward, and the last rank to arrive works from the other end. Ranks take
    pieces under a lock on the block's file (one byte per piece), so each piece is done once. Without a
    SharedStep the optimizer reads the result area in place: each gradient tensor is pointed at its piece of it,
    so nothing is copied back, and the trainer clears gradients with set_to_zero=False, which lets go of that
    memory instead of zeroing it under the other ranks' feet.

    Ordering: a rank writes a slot for the next exchange only after every rank has said it finished reading this
    one ("left"); the result area and the shared parameters are rewritten only after every rank has copied in
    the next exchange's gradient of that parameter, so after every rank has finished with it in this step (its
    optimizer step, or its forward and backward). Spinning on flags written with plain stores relies on x86's
    ordering of stores (choose() picks shm only there). A rank that does not arrive within `timeout` seconds
    (Train.heartbeat_timeout) ends this one with its rank named; a rank that died is noticed sooner by the
    supervisor, which ends them all."""

    PIECE = 1 << 18
    """Floats per piece: 1 MiB, within the L2 cache while it is summed, scaled and applied."""

    def __init__(self, params, dist: DistEnv, mapping, lock: int, timeout: float = 60.0, step=None) -> None:
        super().__init__(params, dist)
        self.timeout, self.lock, world, n = timeout, lock, dist.world_size, len(self.params)
        self.pieces = pieces(self.bounds)
        first = np.cumsum([0] + [len(x) for x in self.pieces])
        self.piece_ids = [range(int(a), int(b)) for a, b in zip(first[:-1], first[1:])]
        npieces = int(first[-1])
        ints = np.frombuffer(mapping, dtype=np.int64, count=header_ints(world, n, npieces))
        ready, self.claimed, self.done, self.left, self.seeded = np.split(
            ints, np.cumsum([world * n, npieces, npieces, world]))
        self.ready = ready.reshape(world, n)
        """ready[r, k]: the exchange whose gradient of parameter k rank r has put in its slot; claimed[i] and
        done[i]: the exchange whose piece i a rank has taken on and finished; left[r]: the last exchange rank r
        has finished (read every slot it needed and its gradients point to the result); seeded: rank 0 has put
        the parameters and velocities in the block."""
        self.block = np.frombuffer(mapping, dtype=np.float32, offset=header_bytes(world, n, npieces),
                                   count=areas(world, step is not None) * self.total).reshape(-1, self.total)
        self.slot, self.mean = self.block[dist.rank], self.block[world]
        self.exchange, self.order, self.skipping = 0, [], False
        self._map = mapping  # the arrays above are views of it
        self.step, self.updates = step, step is not None
        if step is None:  # the optimizer reads the mean in place
            self.result = [internals.as_tensor(self.mean[a:b].reshape(p.shape))
                           for p, a, b in zip(self.params, self.bounds[:-1], self.bounds[1:])]
        else:
            step.share(self, self.block[world + 1], self.block[world + 2])
        for k, p in enumerate(self.params):
            internals.on_grad_ready(p, functools.partial(self._arrived, k))

    def skip(self):
        """Micro-batches before the last of an update: gradients accumulate, nothing is copied."""
        return flag(self, "skipping")

    def _arrived(self, k: int) -> None:
        if not self.skipping:
            self._copy_in(k)

    def _copy_in(self, k: int) -> None:
        if not self.order:  # this exchange's first write to my slot: has everyone finished reading the last one?
            self._wait(lambda: self.left.min() >= self.exchange, lambda: np.flatnonzero(self.left < self.exchange))
        p, (a, b) = self.params[k], self.bounds[k:k + 2]
        self.slot[a:b] = 0 if p.grad is None else internals.numpy_view(p.grad.detach()).reshape(-1)
        self.ready[self.dist.rank, k] = self.exchange + 1  # after the copy (x86: stores in order)
        self.order.append(k)

    def __call__(self) -> None:
        now, rank = self.exchange + 1, self.dist.rank
        for k in np.flatnonzero(self.ready[rank] != now):  # parameters whose hook did not run: unused this step
            self._copy_in(int(k))
        if self.step is not None:
            self.step.begin()
        last = bool((self.ready == now).all())
        for k in reversed(self.order) if last else self.order:
            for i in self.piece_ids[k]:
                if self._claim(i, now):
                    self._piece(k, i, now)
        self._wait(lambda: self.done.min() >= now, lambda: np.flatnonzero(self.left < now))
        if self.step is None:
            for p, result in zip(self.params, self.result):
                internals.ensure_grad(p)  # unused here: a gradient of its own first (sharing `result` aliases it)
                internals.share_buffer(result, p.grad)
        self.left[rank], self.exchange, self.order = now, now, []

    def _claim(self, i: int, now: int) -> bool:
        """Whether this rank takes piece i of this exchange (no other rank has)."""
        if self.claimed[i] == now:
            return False
        fcntl.lockf(self.lock, fcntl.LOCK_EX, 1, i)
        try:
            mine = self.claimed[i] != now
            self.claimed[i] = now
        finally:
            fcntl.lockf(self.lock, fcntl.LOCK_UN, 1, i)
        return mine

    def _piece(self, k: int, i: int, now: int) -> None:
        """The mean of piece i (of parameter k) over all slots; then, with a SharedStep, the update of that piece of
        the shared parameters. Only the rank that claimed the piece writes it."""
        self._wait(lambda: (self.ready[:, k] == now).all(), lambda: np.flatnonzero(self.ready[:, k] != now))
        a, b = self.pieces[k][i - self.piece_ids[k].start]
        total = np.add(self.block[0, a:b], self.block[1, a:b], out=self.mean[a:b])
        for r in range(2, self.dist.world_size):
            total += self.block[r, a:b]
        total *= np.float32(1.0 / self.dist.world_size)
        if self.step is not None:
            self.step(k, i)
        self.done[i] = now

    def _wait(self, ready, late) -> None:
        deadline = time.monotonic() + self.timeout
        while not ready():
            os.sched_yield()
            if time.monotonic() > deadline:
                ranks = [int(r) for r in late() if r != self.dist.rank]
                raise RuntimeError(f"gradient sync: rank(s) {ranks} did not reach step {self.exchange + 1}'s "
                                   f"gradient exchange within {self.timeout:g} s (Train.heartbeat_timeout)")


class SharedStep:
    """paddle's Momentum update applied piece by piece by the rank that reduced the piece, to parameters and
    velocities that every rank shares in the block: one update per piece instead of one per rank, and it runs
    on the ranks that wait for the last one. It calls paddle's own kernel (momentum_) with the optimizer's
    settings, so parameters and velocities come out bit for bit as from optimizer.step() (tests compare), and
    the optimizer's velocity tensors point at the shared ones, so its state_dict and checkpoints stay whole."""

    def __init__(self, optimizer) -> None:
        self.optimizer = optimizer
        self.lr: dict = {}

    @staticmethod
    def supports(optimizer, scaler=None) -> bool:
        """Plain fp32 Momentum without gradient clipping, parameter groups, multi-tensor or AMP loss scaling;
        anything else keeps optimizer.step()."""
        return (scaler is None and internals.missing("shared_momentum_step") is None
                and internals.momentum_kind(optimizer))

    def share(self, sync: ShmSync, params: np.ndarray, velocity: np.ndarray) -> None:
        """Rank 0 puts its parameters and velocities (equal on every rank: broadcast, or one checkpoint) in the
        block; then every rank's parameters and velocity tensors point at them."""
        opt = self.optimizer
        velocities = internals.momentum_velocities(opt, sync.params)
        spans = list(zip(sync.params, velocities, sync.bounds[:-1], sync.bounds[1:]))
        if sync.dist.is_main:
            for p, v, a, b in spans:
                params[a:b], velocity[a:b] = p.numpy().reshape(-1), v.numpy().reshape(-1)
            sync.seeded[0] = 1  # after the copies (x86: stores in order)
        sync._wait(lambda: sync.seeded[0] == 1, lambda: [0])
        for p, v, a, b in spans:
            internals.share_buffer(internals.as_tensor(params[a:b].reshape(p.shape)), p)
            internals.share_buffer(internals.as_tensor(velocity[a:b].reshape(p.shape)), v)
        self.terms = [internals.momentum_terms(opt, p) for p in sync.params]
        self.tensors = [tuple(internals.as_tensor(area[a:b]) for area in (params, velocity, sync.mean))
                        for k_pieces in sync.pieces for a, b in k_pieces]

    def begin(self) -> None:
        """This update's learning rate per multiplier: the scheduler's value, which optimizer.step() would read."""
        lr = paddle.full([1], self.optimizer.get_lr(), dtype="float32")
        self.lr = {m: lr if m == 1.0 else lr * m for m in {t[2] for t in self.terms}}

    def __call__(self, k: int, i: int) -> None:
        param, velocity, grad = self.tensors[i]
        terms = self.terms[k]
        internals.momentum_update(self.optimizer, param, grad, velocity, self.lr[terms[2]], terms)


def areas(world: int, shared_step: bool) -> int:
    """float32 areas of the block: one slot per rank and the result; with a SharedStep, parameters and
    velocities."""
    return world + (3 if shared_step else 1)


def header_ints(world: int, nparams: int, npieces: int) -> int:
    """Flags before the slots: ready (world x params), claimed and done (per piece), left (per rank), seeded."""
    return world * nparams + 2 * npieces + world + 1


def header_bytes(world: int, nparams: int, npieces: int) -> int:
    return -(-8 * header_ints(world, nparams, npieces) // 4096) * 4096


def shared_block(size: int, dist: DistEnv) -> tuple[mmap.mmap, int]:
    """`size` zero bytes in /dev/shm mapped by every rank, and a descriptor of it to lock pieces by; the file is
    gone once all have opened it, so nothing is left behind if a rank dies later."""
    name = None
    if dist.is_main:
        fd, name = tempfile.mkstemp(prefix="paddledist-grads-", dir=SHM_DIR)
        os.ftruncate(fd, size)
        os.close(fd)
    name = broadcast_object(name, dist)
    fd = os.open(name, os.O_RDWR)
    mapping = mmap.mmap(fd, size)
    barrier(dist)
    if dist.is_main:
        os.unlink(name)
    return mapping, fd


def shm_sync(params, dist: DistEnv, timeout: float, step: Optional[SharedStep] = None) -> ShmSync:
    mapping, fd = shared_block(block_size(params, dist.world_size, step is not None), dist)
    return ShmSync(params, dist, mapping, fd, timeout, step)


def flat_bounds(params) -> np.ndarray:
    return np.cumsum([0] + [int(np.prod(p.shape)) for p in params])


def pieces(bounds: np.ndarray) -> list[list[tuple[int, int]]]:
    """Per parameter, its pieces of at most ShmSync.PIECE floats as (start, end) in the flat buffer."""
    return [[(lo, min(lo + ShmSync.PIECE, int(hi))) for lo in range(int(a), int(hi), ShmSync.PIECE)]
            for a, hi in zip(bounds[:-1], bounds[1:])]


def block_size(params, world: int, shared_step: bool = False) -> int:
    """Bytes of the shared block for these trainable parameters: flags, then the float32 areas."""
    bounds = flat_bounds(params)
    npieces = sum(len(x) for x in pieces(bounds))
    return header_bytes(world, len(params), npieces) + 4 * areas(world, shared_step) * int(bounds[-1])


def build(mode: str, model, optimizer, kind: str, dist: DistEnv, timeout: float = 60.0, scaler=None,
          bucket_mb: float = 4.0, compression: str = "none"):
    """(model, optimizer, sync): wrapped by fleet for the reducer, else as they are, with rank 0's parameters
    copied to every rank. The shm sync also takes over the optimizer's update where SharedStep supports it."""
    params = [p for p in model.parameters() if not p.stop_gradient]
    nbytes = 4 * int(flat_bounds(params)[-1])
    shared = SharedStep.supports(optimizer, scaler)
    if dist.distributed and kind == "cpu" and mode in ("auto", "bucket"):
        internals.check_global_all_reduce(dist.world_size)  # a collective: every rank, here, before the choice
    chosen = choose(mode, kind, dist, block_size(params, dist.world_size, shared), shm_free_bytes())
    if chosen == "none":
        return model, optimizer, NoSync()
    if dist.is_main:
        log.info("gradient sync: %s (Train.grad_sync=%s), %.1f MB of gradients%s%s", chosen, mode, nbytes / 1e6,
                 ", optimizer step shared" if chosen == "shm" and shared else "",
                 f", buckets of {bucket_mb:g} MB, sent as {compression}" if chosen == "bucket" else "")
    if chosen == "reducer":
        from paddle.distributed import fleet

        model, optimizer = fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)
        return model, optimizer, NoSync(model)
    broadcast_parameters(model)
    if chosen == "shm":
        return model, optimizer, shm_sync(params, dist, timeout, SharedStep(optimizer) if shared else None)
    if chosen == "bucket":
        return model, optimizer, BucketSync(params, dist, bucket_mb, compression, timeout)
    return model, optimizer, FlatSync(params, dist)


def broadcast_parameters(model) -> None:
    """Rank 0's parameters and buffers (BatchNorm statistics) on every rank, as the reducer does at wrap time."""
    with paddle.no_grad():
        for tensor in model.state_dict().values():
            pdist.broadcast(tensor, src=0)

"""CPU ranks on one x86-64 machine: gradients meet in one shared-memory block (Train.grad_sync=shm)."""

from __future__ import annotations

import fcntl
import functools
import mmap
import os
import tempfile
import time
from typing import Optional

import numpy as np

from paddledist import paddle_internals as internals
from paddledist.engine.distenv import DistEnv, barrier, broadcast_object
from paddledist.engine.sync.bucket import flag
from paddledist.engine.sync.flat import FlatParams, flat_bounds
from paddledist.engine.sync.policy import SHM_DIR
from paddledist.engine.sync.shared_step import SharedStep


class ShmSync(FlatParams):
    """All ranks on this machine: one shared-memory block of flags, one gradient slot per rank and a result
    area (with a `SharedStep`, the parameters and the optimizer's velocities too).

    A backward hook copies each gradient into the rank's slot; ranks done with backward take 1 MiB pieces
    under a file lock, sum the mean into the result (and apply the shared step), so the work hides in the wait
    for the last rank. Flags are plain stores that rely on x86's store ordering; a rank missing for `timeout`
    seconds ends this one with its rank named. Ordering rules: docs/design_notes.md, "The shm sync"."""

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


def pieces(bounds: np.ndarray) -> list[list[tuple[int, int]]]:
    """Per parameter, its pieces of at most ShmSync.PIECE floats as (start, end) in the flat buffer."""
    return [[(lo, min(lo + ShmSync.PIECE, int(hi))) for lo in range(int(a), int(hi), ShmSync.PIECE)]
            for a, hi in zip(bounds[:-1], bounds[1:])]


def block_size(params, world: int, shared_step: bool = False) -> int:
    """Bytes of the shared block for these trainable parameters: flags, then the float32 areas."""
    bounds = flat_bounds(params)
    npieces = sum(len(x) for x in pieces(bounds))
    return header_bytes(world, len(params), npieces) + 4 * areas(world, shared_step) * int(bounds[-1])

"""Gradient averaging through paddle's own all-reduce, overlapped with backward (Train.grad_sync=bucket).

Buckets of about Train.grad_bucket_mb in backward's order; each gradient is a view of its slice of a bucket
(the grad_view capability), so backward writes straight into what goes on the wire. A backward hook marks
gradients ready; a complete bucket is all-reduced in place on a background thread (gloo's call blocks but lets
go of the GIL) while backward goes on, strictly in index order on every rank; after backward the caller waits
and scales by 1/world size. bf16 halves the bytes; fp16 is refused on CPU (gloo's sum gives inf). The why of
each choice: docs/design_notes.md, "The bucket sync"."""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Optional

import numpy as np
import paddle

from paddledist import paddle_internals as internals
from paddledist.engine.distenv import DistEnv
from paddledist.engine.sync.none import drop_grads

WIRE = {"none": None, "bf16": "bfloat16", "fp16": "float16"}
"""Train.grad_compression -> the dtype gradients travel in (None: as they are, float32)."""
LAST_BUCKET_MB = 1.0
"""The size of the bucket of the first parameters (paddle's DataParallel default last_comm_buffer_size)."""


def plan_buckets(sizes: list[int], limit: int, last_limit: Optional[int] = None) -> list[list[int]]:
    """Parameter indices per bucket, last parameter first; a bucket closes once it holds >= `limit` floats.
    With `last_limit`, the first parameters, whose gradients backward produces last, get a bucket of their own
    of at most `last_limit` floats (and at most `limit`; at least one parameter): what is still to send once
    backward ends is small (paddle's DataParallel does the same with its last_comm_buffer_size)."""
    front = _leading_within(sizes, min(limit, last_limit)) if last_limit else 0
    buckets, current, filled = [], [], 0
    for k in reversed(range(front, len(sizes))):
        current.append(k)
        filled += sizes[k]
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return [*buckets, list(reversed(range(front)))] if front else buckets


def _leading_within(sizes: list[int], cap: int) -> int:
    """How many of the first sizes fit in `cap` together (at least one, when there is one)."""
    count, filled = 0, 0
    while count < len(sizes) and (count == 0 or filled + sizes[count] <= cap):
        filled += sizes[count]
        count += 1
    return count


def _floats(mb: float) -> int:
    """How many float32 values `mb` MB hold (at least one)."""
    return max(1, int(mb * (1 << 20) / 4))


class BucketSync:
    timed = True
    """The time of __call__ is the exchange's tail: what backward did not hide."""
    updates = False

    def __init__(self, params, dist: DistEnv, bucket_mb: float = 4.0, compression: str = "none",
                 timeout: float = 60.0) -> None:
        self.params = [p for p in params if not p.stop_gradient]
        self.dist, self.timeout, self.wire_dtype = dist, timeout, WIRE[compression]
        self.scale = np.float32(1.0 / dist.world_size)
        sizes = [int(np.prod(p.shape)) for p in self.params]
        self.buckets = plan_buckets(sizes, _floats(bucket_mb), _floats(LAST_BUCKET_MB))
        self.where = {}
        """Parameter k -> (bucket, start, end) in that bucket's flat buffer."""
        self.flat = []
        for b, members in enumerate(self.buckets):
            offsets = np.cumsum([0] + [sizes[k] for k in members])
            self.where.update({k: (b, int(offsets[i]), int(offsets[i + 1])) for i, k in enumerate(members)})
            self.flat.append(paddle.zeros([int(offsets[-1])], dtype="float32"))
        self.arrays = [internals.numpy_view(t) for t in self.flat]
        self.views = internals.missing("grad_view") is None
        """Whether gradients live in the buckets (else they are copied in and out)."""
        self._attach()
        self.wire: list[Optional[paddle.Tensor]] = [None] * len(self.buckets)
        """Per bucket, its copy in the wire dtype (bf16 only; a float32 bucket is all-reduced where it lies)."""
        self.exchanges = 0
        """Completed exchanges (one per update); every bucket is all-reduced once per exchange and never else."""
        self.sent = 0
        """Buckets all-reduced so far, over all exchanges."""
        self.skipping = False
        self._reset()
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Semaphore(0)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._serve, name="paddledist-grad-allreduce", daemon=True)
        self._thread.start()
        for k, p in enumerate(self.params):
            internals.on_grad_ready(p, lambda k=k: self._arrived(k))

    def _reset(self) -> None:
        self.missing = [len(m) for m in self.buckets]
        self.arrived = [False] * len(self.params)
        self.next = 0  # the next bucket to hand to the thread

    def skip(self):
        """Micro-batches before the last of an update: gradients accumulate in place, nothing is sent."""
        return flag(self, "skipping")

    def _attach(self) -> None:
        """Every gradient a view of its bucket slice again (after paddle gave one memory of its own)."""
        for k, p in enumerate(self.params) if self.views else ():
            b, start, end = self.where[k]
            if not internals.is_view(p, self.flat[b], start):
                internals.grad_view(p, self.flat[b], start, end)

    def clear(self, optimizer) -> None:
        """After the update: zero the buckets (the gradients' memory) for the next one's backward."""
        if not self.views:
            drop_grads(optimizer)
            return
        for array in self.arrays:
            array.fill(0)
        self._attach()

    def _arrived(self, k: int) -> None:
        if self.skipping or self.arrived[k]:
            return
        b, start, end = self.where[k]
        grad = self.params[k].grad
        if not (self.views and internals.is_view(self.params[k], self.flat[b], start)):  # no view: copy it in
            self.arrays[b][start:end] = 0 if grad is None else internals.numpy_view(grad.detach()).reshape(-1)
        self.arrived[k] = True
        self.missing[b] -= 1
        self._send_ready()

    def _send_ready(self) -> None:
        while self.next < len(self.buckets) and self.missing[self.next] == 0:
            b = self.next
            if self.wire_dtype is not None:
                self.wire[b] = self.flat[b].astype(self.wire_dtype)
            self._todo.put(b)
            self.next += 1

    def close(self) -> None:
        """End the sending thread before the process exits (a thread still waiting inside paddle while the
        interpreter and paddle's process group are torn down crashed a rank at exit, after its last step)."""
        self._todo.put(None)
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            b = self._todo.get()
            if b is None:
                return
            try:
                self._exchange(b)
            except BaseException as e:  # noqa: BLE001  (raised again on the training thread, in __call__)
                self._error = e
            self._done.release()

    def _exchange(self, b: int) -> None:
        """All-reduce bucket b: the sum (the training thread scales it to the mean after backward)."""
        internals.global_all_reduce(self.flat[b] if self.wire_dtype is None else self.wire[b]).wait()

    def __call__(self) -> None:
        for k in range(len(self.params)):  # parameters this rank did not use this step: zeros
            self._arrived(k)
        for _ in self.buckets:
            if not self._done.acquire(timeout=self.timeout):
                raise RuntimeError(f"gradient sync: a bucket's all-reduce did not finish within {self.timeout:g} s "
                                   f"(Train.heartbeat_timeout): another rank stopped or the link stalled")
        if self._error is not None:
            raise RuntimeError(f"gradient sync: all-reduce failed: {self._error}") from self._error
        self._read_back()
        self.sent += len(self.buckets)
        self.exchanges += 1
        self._reset()

    def _read_back(self) -> None:
        """The mean into the buckets, in place; gradients that are not views get theirs copied out."""
        for b in range(len(self.buckets)):
            if self.wire_dtype is None:
                np.multiply(self.arrays[b], self.scale, out=self.arrays[b])
            else:
                np.multiply(internals.numpy_view(self.wire[b].astype("float32")), self.scale, out=self.arrays[b])
            for k in self.buckets[b]:
                p, (_, start, end) = self.params[k], self.where[k]
                if not (self.views and internals.is_view(p, self.flat[b], start)):
                    internals.ensure_grad(p)  # unused here, maybe used elsewhere: a gradient of its own
                    internals.numpy_view(p.grad.detach()).reshape(-1)[:] = self.arrays[b][start:end]


@contextlib.contextmanager
def flag(obj, name: str):
    """`obj.name` is True inside the block."""
    setattr(obj, name, True)
    try:
        yield
    finally:
        setattr(obj, name, False)

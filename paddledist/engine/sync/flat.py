"""One all-reduce of a persistent flat buffer after backward (Train.grad_sync=flat), and the parts the
shared-memory sync shares with it: the trainable parameters in a fixed order and their place in a flat buffer."""

from __future__ import annotations

import contextlib

import numpy as np
import paddle
import paddle.distributed as pdist

from paddledist import paddle_internals as internals
from paddledist.engine.distenv import DistEnv
from paddledist.engine.sync.none import drop_grads


class FlatParams:
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

    def clear(self, optimizer) -> None:
        drop_grads(optimizer)

    def close(self) -> None:
        pass


class FlatSync(FlatParams):
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


def flat_bounds(params) -> np.ndarray:
    return np.cumsum([0] + [int(np.prod(p.shape)) for p in params])


def broadcast_parameters(model) -> None:
    """Rank 0's parameters and buffers (BatchNorm statistics) on every rank, as the reducer does at wrap time."""
    with paddle.no_grad():
        for tensor in model.state_dict().values():
            pdist.broadcast(tensor, src=0)

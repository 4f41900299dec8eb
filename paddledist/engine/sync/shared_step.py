"""paddle's Momentum update applied once per piece of the shared block, for every rank (shm sync)."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np
import paddle

from paddledist import paddle_internals as internals
from paddledist.engine.distenv import DistEnv


class Block(Protocol):
    """What the step reads of the shm sync's shared block (engine/sync/shm.py's ShmSync)."""
    params: list
    bounds: Sequence[int]
    dist: DistEnv
    seeded: np.ndarray
    mean: np.ndarray
    pieces: list

    def _wait(self, ready: Callable[[], bool], late: Callable[[], list]) -> None: ...


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

    def share(self, sync: Block, params: np.ndarray, velocity: np.ndarray) -> None:
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

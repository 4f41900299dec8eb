"""The trainer's view of the process group: a small value, plus the few collectives the trainer uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from paddledist import paddle_version


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    """Global rank; rank 0 owns Global.output."""
    world_size: int = 1
    local_rank: int = 0
    """Rank on this machine; selects the GPU."""
    nnodes: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_process_group(dist: DistEnv) -> None:
    """fleet.init(is_collective=True) when there is more than one process (gloo on CPU, NCCL on GPU)."""
    if dist.distributed:
        from paddle.distributed import fleet

        paddle_version.check_for_collectives()  # a platform may start workers without our launcher's check
        fleet.init(is_collective=True)


def all_reduce_sum(values: np.ndarray, dist: DistEnv) -> np.ndarray:
    """Element-wise sum of a small float64 vector over all ranks."""
    if not dist.distributed:
        return np.asarray(values, dtype=np.float64)
    import paddle
    import paddle.distributed as pdist

    tensor = paddle.to_tensor(np.asarray(values, dtype=np.float64))
    pdist.all_reduce(tensor)
    return tensor.numpy()


def broadcast_object(obj: Any, dist: DistEnv, src: int = 0) -> Any:
    """Rank `src`'s object on every rank (used to share a checkpoint that exists on one machine only)."""
    if not dist.distributed:
        return obj
    import paddle.distributed as pdist

    box = [obj]
    pdist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj: Any, dist: DistEnv) -> list:
    """Every rank's `obj`, in rank order, on every rank (small objects: lists of names)."""
    if not dist.distributed:
        return [obj]
    import paddle.distributed as pdist

    gathered: list = []
    pdist.all_gather_object(gathered, obj)
    return gathered


def barrier(dist: DistEnv) -> None:
    if dist.distributed:
        import paddle.distributed as pdist

        pdist.barrier()

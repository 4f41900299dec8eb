"""Rank arithmetic for data parallelism, as pure functions tested for every rank in one process.

Training: one permutation per epoch (seed + epoch), cut into global batches of
`batch_size * world_size`; rank r takes the r-th slice of each. The last global batch may be short:
it is split as evenly as possible and short ranks are padded with entries marked as padding, which
carry zero weight in the loss. So every sample is used exactly once per epoch and, with the loss
normalised by the real global count, data parallel equals large-batch SGD exactly.

Evaluation: contiguous, unpadded shards; each validation sample is counted exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankBatch:
    indices: tuple[int, ...]
    """Dataset indices for this rank's micro-batch (padding repeats a real index)."""
    valid: tuple[bool, ...]
    """False for padding entries."""
    global_count: int
    """Real samples in the global batch across all ranks (the loss normaliser)."""


def epoch_permutation(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n)
    return np.random.RandomState((seed * 1_000_003 + epoch) % (2**32)).permutation(n)


def steps_per_epoch(n: int, batch_size: int, world_size: int) -> int:
    global_batch = batch_size * world_size
    return (n + global_batch - 1) // global_batch


def rank_batches(n: int, batch_size: int, world_size: int, rank: int, seed: int, epoch: int,
                 shuffle: bool = True) -> list[RankBatch]:
    """This rank's batches for one epoch; every rank gets the same number of batches."""
    order = epoch_permutation(n, seed, epoch, shuffle)
    global_batch = batch_size * world_size
    batches = []
    for start in range(0, n, global_batch):
        chunk = order[start:start + global_batch]
        lo, hi = _even_slice(len(chunk), world_size, rank)
        per_rank = -(-len(chunk) // world_size)
        mine = [int(i) for i in chunk[lo:hi]]
        valid = [True] * len(mine)
        filler = mine[0] if mine else int(chunk[0])
        while len(mine) < per_rank:
            mine.append(filler)
            valid.append(False)
        batches.append(RankBatch(tuple(mine), tuple(valid), len(chunk)))
    return batches


def eval_shard(n: int, world_size: int, rank: int) -> range:
    """Contiguous, unpadded shard: the shards of all ranks partition range(n)."""
    lo, hi = _even_slice(n, world_size, rank)
    return range(lo, hi)


def _even_slice(n: int, parts: int, k: int) -> tuple[int, int]:
    """Part k of n items split into `parts` nearly equal contiguous parts (larger parts first)."""
    base, extra = divmod(n, parts)
    lo = k * base + min(k, extra)
    return lo, lo + base + (1 if k < extra else 0)

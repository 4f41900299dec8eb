"""Rank arithmetic, tested for every rank of world sizes 1-4 inside one process (sizes that do not divide evenly)."""

from __future__ import annotations

import itertools

import pytest

from paddledist.data.sharding import eval_shard, rank_batches, steps_per_epoch
from paddledist.engine.schedule import lr_factor

pytestmark = pytest.mark.unit

SIZES = [1, 2, 3, 7, 31, 64, 65, 100, 359, 1437]


@pytest.mark.parametrize("n,world,batch", list(itertools.product(SIZES, [1, 2, 3, 4], [1, 5, 32])))
def test_training_shards_use_every_sample_exactly_once(n, world, batch):
    per_rank = [rank_batches(n, batch, world, r, seed=3, epoch=2) for r in range(world)]
    assert {len(b) for b in per_rank} == {steps_per_epoch(n, batch, world)}, "every rank must take the same steps"
    used = [i for batches in per_rank for b in batches for i, ok in zip(b.indices, b.valid) if ok]
    assert sorted(used) == list(range(n))
    for step in range(len(per_rank[0])):
        rows = [batches[step] for batches in per_rank]
        assert len({len(b.indices) for b in rows}) == 1, "equal micro-batch length on every rank (padding)"
        assert {b.global_count for b in rows} == {sum(sum(b.valid) for b in rows)}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_global_batches_match_the_single_process_batches(world):
    """Data parallel sees, step by step, the same sample sets as one process with world x batch."""
    n, batch = 203, 8
    single = rank_batches(n, batch * world, 1, 0, seed=5, epoch=1)
    shards = [rank_batches(n, batch, world, r, seed=5, epoch=1) for r in range(world)]
    for step, one in enumerate(single):
        together = sorted(i for s in shards for i, ok in zip(s[step].indices, s[step].valid) if ok)
        assert together == sorted(one.indices)


def test_order_is_seeded_and_changes_per_epoch():
    a = rank_batches(100, 10, 2, 0, seed=1, epoch=1)
    assert a == rank_batches(100, 10, 2, 0, seed=1, epoch=1)
    assert a != rank_batches(100, 10, 2, 0, seed=1, epoch=2)
    assert a != rank_batches(100, 10, 2, 0, seed=2, epoch=1)


@pytest.mark.parametrize("n,world", list(itertools.product(SIZES + [0], [1, 2, 3, 4])))
def test_eval_shards_partition_the_validation_set(n, world):
    shards = [list(eval_shard(n, world, r)) for r in range(world)]
    assert sorted(i for s in shards for i in s) == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_learning_rate_warms_up_then_decays_to_zero():
    total, warmup = 100, 10
    factors = [lr_factor(s, total, warmup) for s in range(total + 1)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[10] == pytest.approx(1.0) and factors[total] == pytest.approx(0.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_a_mid_epoch_resume_iterates_the_rest_of_the_same_epoch(rank):
    """set_epoch(e, skip=k), as a preemption checkpoint's resume calls it: the batches of an uninterrupted epoch
    from the (k+1)-th on, while batches() (the loss weights' denominators) still covers the whole epoch."""
    from paddledist.data.pipeline import TrainBatchSampler

    whole, resumed = TrainBatchSampler(103, 4, 3, rank, 7), TrainBatchSampler(103, 4, 3, rank, 7)
    whole.set_epoch(2)
    resumed.set_epoch(2, skip=5)
    assert list(resumed) == list(whole)[5:] and len(list(whole)) == len(resumed) == 9
    assert resumed.batches() == whole.batches()

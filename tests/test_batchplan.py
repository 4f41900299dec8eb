"""The global batch kept across rank counts (engine/batchplan.py), and why keeping it keeps the math: every
update of an epoch sees the same samples however the global batch is split into ranks x accumulation x
per-rank batch (data/sharding.py, engine/schedule.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddledist.config import load as load_config
from paddledist.data.sharding import rank_batches
from paddledist.engine.batchplan import plan_batch, plan_for
from paddledist.engine.schedule import update_group
from paddledist.errors import UserError

pytestmark = pytest.mark.unit


def test_fewer_ranks_accumulate_to_the_same_global_batch():
    """3 ranks x 8 = 24 on 2 ranks: accumulation ceil(24 / 16) = 2 of per-rank 6."""
    plan = plan_batch(8, 1, 2, 24, origin="the resumed checkpoint's")
    assert (plan.batch_size, plan.accum_steps, plan.global_batch) == (6, 2, 24)
    assert "keeping the global batch of 24 samples (the resumed checkpoint's) on 2 rank(s)" in plan.note


def test_the_configuration_itself_is_left_alone():
    plan = plan_batch(8, 3, 2, None)
    assert (plan.batch_size, plan.accum_steps, plan.global_batch, plan.note) == (8, 3, 48, "")
    assert plan_batch(8, 3, 2, 48).note == ""


def test_a_global_batch_that_does_not_split_is_one_error_naming_the_sizes():
    with pytest.raises(UserError) as e:
        plan_batch(10, 1, 2, 30, origin="Train.global_batch_size")
    text = str(e.value)
    assert "30 samples (Train.global_batch_size) does not split over 2 rank(s)" in text
    assert "30/4 = 7.5" in text and "Train.batch_size=10" in text and "Train.elastic_batch=scale_lr" in text


def test_scale_lr_keeps_the_per_rank_batch_and_scales_the_rate_linearly():
    plan = plan_batch(10, 1, 2, 30, elastic="scale_lr")
    assert (plan.batch_size, plan.accum_steps, plan.global_batch) == (10, 1, 20)
    assert plan.learning_rate(0.3, scale_lr=False) == pytest.approx(0.2)
    assert "scaling the learning rate by 0.666667" in plan.note


def test_linear_scaling_belongs_to_the_configured_batch_whatever_the_split():
    """Train.scale_lr: base x global / Train.batch_size, so keeping the global batch keeps the rate."""
    assert plan_batch(32, 2, 4, None).learning_rate(0.1, scale_lr=True) == pytest.approx(0.8)
    assert plan_batch(32, 1, 1, 256).learning_rate(0.1, scale_lr=True) == pytest.approx(0.8)
    assert plan_batch(32, 2, 4, None).learning_rate(0.1, scale_lr=False) == pytest.approx(0.1)


def test_the_target_comes_from_the_config_then_the_checkpoint():
    cfg = load_config(None, ["Train.batch_size=8"])
    assert plan_for(cfg, 2, {"global_batch": 24}).global_batch == 24
    assert plan_for(cfg, 2, {}).global_batch == 16
    pinned = load_config(None, ["Train.batch_size=8", "Train.global_batch_size=32"])
    assert plan_for(pinned, 2, {"global_batch": 24}).global_batch == 32


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 64), st.integers(1, 256))
def test_a_plan_never_exceeds_the_configured_batch_and_always_meets_the_target(target, world, batch):
    try:
        plan = plan_batch(batch, 1, world, target)
    except UserError:
        accum = -(-target // (world * batch))
        assert target % (world * accum)  # refused only where the rule's split is not whole
        return
    assert plan.global_batch == target and 1 <= plan.batch_size <= batch


def update_samples(n: int, per_rank: int, world: int, accum: int, epoch: int) -> list[frozenset]:
    """The real samples of each optimizer update of one epoch, over every rank and micro-batch."""
    ranks = [rank_batches(n, per_rank, world, r, seed=7, epoch=epoch) for r in range(world)]
    steps = len(ranks[0])
    updates, seen = [], set()
    for i in range(steps):
        group = update_group(i, accum, steps)
        if i + 1 == group.stop:
            samples = {idx for b in ranks for j in group for idx, ok in zip(b[j].indices, b[j].valid) if ok}
            assert not samples & seen
            seen |= samples
            updates.append(frozenset(samples))
    assert seen == set(range(n))
    return updates


@pytest.mark.parametrize("n", [96, 100, 359, 1437])
def test_every_split_of_a_global_batch_makes_the_same_updates(n):
    """3 ranks x 8, 2 ranks x 2 x 6, 1 rank x 3 x 8, 4 ranks x 6: the same sample sets, update by update."""
    reference = update_samples(n, 8, 3, 1, epoch=2)
    for world in (1, 2, 4, 6, 12, 24):
        plan = plan_batch(8, 1, world, 24)
        assert update_samples(n, plan.batch_size, world, plan.accum_steps, epoch=2) == reference, world

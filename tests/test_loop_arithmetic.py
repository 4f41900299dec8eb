"""The trainer's arithmetic as pure functions, checked for every index of small epochs: update groups of
Train.accum_steps micro-batches (the last one shorter), which micro-batch steps the optimizer, and the steps
left for the ETA; and the hook base class is a no-op for every event the trainer calls."""

from __future__ import annotations

import pytest

from paddledist.engine.schedule import eta_seconds, is_update_step, steps_left, update_group

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("accum,steps", [(1, 5), (2, 5), (3, 7), (4, 4), (5, 3)])
def test_update_groups_partition_the_epoch(accum, steps):
    groups = [update_group(i, accum, steps) for i in range(steps)]
    distinct = list(dict.fromkeys((g.start, g.stop) for g in groups))
    assert [i for start, stop in distinct for i in range(start, stop)] == list(range(steps))
    assert all(stop - start == accum for start, stop in distinct[:-1])
    assert 0 < distinct[-1][1] - distinct[-1][0] <= accum
    assert all(i in groups[i] for i in range(steps))
    assert [i for i in range(steps) if is_update_step(i, accum, steps)] == [stop - 1 for _, stop in distinct]


def test_steps_left_counts_down_to_zero_over_the_whole_run():
    epochs, per_epoch = 3, 4
    left = [steps_left(e, epochs, i, per_epoch) for e in range(1, epochs + 1) for i in range(per_epoch)]
    assert left == list(range(epochs * per_epoch - 1, -1, -1))
    assert eta_seconds(0, left[0], 0.5) == 5.5


def test_the_hook_base_class_answers_every_event_with_nothing():
    from paddledist.engine.trainer import Hook

    for event in ("before_train", "before_epoch", "after_step", "after_epoch", "after_train"):
        assert getattr(Hook(), event)(object()) is None

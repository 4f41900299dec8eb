"""Every gradient sync implements the whole GradSync protocol the trainer calls (engine/sync/__init__.py): a
strategy missing a method, `close()` included, fails here instead of in the middle of a job."""

from __future__ import annotations

import inspect

import pytest

from paddledist.engine import sync
from paddledist.engine.sync import GradSync
from paddledist.engine.sync import bucket, flat, none, shm

pytestmark = pytest.mark.unit

MEMBERS = ["timed", "updates", "skip", "__call__", "clear", "close"]
STRATEGIES = [none.NoSync, flat.FlatSync, shm.ShmSync, bucket.BucketSync]


def protocol_members() -> set[str]:
    declared = set(GradSync.__annotations__) | {n for n, v in vars(GradSync).items() if inspect.isfunction(v)}
    return {n for n in declared if not n.startswith("_") or n == "__call__"}


def test_the_protocol_names_what_the_trainer_calls():
    assert protocol_members() == set(MEMBERS)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda c: c.__name__)
def test_every_strategy_implements_every_member(strategy):
    missing = [m for m in MEMBERS if not hasattr(strategy, m)]
    assert not missing, f"{strategy.__name__} lacks {missing}"
    for method in ("skip", "__call__", "clear", "close"):
        assert callable(getattr(strategy, method))
    assert isinstance(strategy.timed, bool) and isinstance(strategy.updates, bool)


def test_every_strategy_module_is_registered_here():
    """A new way under engine/sync/ must be added to STRATEGIES (and so to the protocol check)."""
    found = {cls for module in (none, flat, shm, bucket) for _, cls in inspect.getmembers(module, inspect.isclass)
             if cls.__module__ == module.__name__ and cls.__name__.endswith("Sync")}
    assert found == set(STRATEGIES)


def test_a_strategy_without_close_is_not_a_grad_sync():
    class Partial:
        timed = updates = False

        def skip(self): ...

        def __call__(self): ...

    assert not isinstance(Partial(), GradSync)
    assert isinstance(sync.NoSync(), GradSync)


class Recording(sync.NoSync):
    closed = 0

    def close(self) -> None:
        self.closed += 1


class Breaking:
    """A sampler whose epoch fails at once: training ends with an exception."""

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        raise RuntimeError("the data went away")


def test_the_trainer_closes_its_sync_when_training_fails():
    """No getattr fallback in the stage: the trainer calls close() itself, also when an epoch raises."""
    from paddledist.config import load
    from paddledist.engine.distenv import DistEnv
    from paddledist.engine.trainer import Trainer

    recording = Recording()
    trainer = Trainer(load(None, []), DistEnv(), None, None, None, None, Breaking(), [], grad_sync=recording)
    with pytest.raises(RuntimeError, match="the data went away"):
        trainer.train()
    assert recording.closed == 1

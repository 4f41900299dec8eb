"""No exchange after backward: one process, or paddle's reducer (which syncs inside backward)."""

from __future__ import annotations

import contextlib


def drop_grads(optimizer) -> None:
    """Drop, not zero: nothing reads the zeros (paddle's next backward replaces them), and the shm sync's
    gradients point at memory the other ranks may still read."""
    optimizer.clear_grad(set_to_zero=False)


class NoSync:
    """One process, or paddle's reducer (which syncs inside backward): nothing to do after backward."""

    timed = False
    """Whether the time of __call__ is the time spent communicating."""
    updates = False
    """Whether __call__ also applies the optimizer's update (the trainer then does not call optimizer.step)."""

    def __init__(self, model=None) -> None:
        self.model = model

    def skip(self):
        """Context for a backward whose gradients must not be synchronised yet (accumulation)."""
        return self.model.no_sync() if self.model is not None else contextlib.nullcontext()

    def __call__(self) -> None:
        pass

    def clear(self, optimizer) -> None:
        drop_grads(optimizer)

    def close(self) -> None:
        pass

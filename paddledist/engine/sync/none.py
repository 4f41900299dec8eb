"""No exchange after backward: one process, or paddle's reducer (which syncs inside backward)."""

from __future__ import annotations

import contextlib


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

    def close(self) -> None:
        pass

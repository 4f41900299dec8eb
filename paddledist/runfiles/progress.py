"""Step progress from the workers to their supervisor, for the stall watchdog (launch/stall.py).

The supervisor creates a folder for each launch and passes it in PADDLEDIST_PROGRESS_DIR. Every rank rewrites
its own small file there (`rank<N>.json`: pid, rank, where it is) after each step; the file's modification
time is the rank's last progress. No collective, no socket: a rename of a ~100-byte file per step (tens of
microseconds). Phases that are not steps but may take long (the end of an epoch: evaluation, rank 0 writing
checkpoints, the barrier after them) are reported as `busy`: the watchdog does not count them as a stall.

Imports nothing of paddle: the supervisor reads the same format.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

PROGRESS_DIR_ENV = "PADDLEDIST_PROGRESS_DIR"
STACK_SIGNAL = signal.SIGUSR2
"""On this signal a worker writes every thread's Python stack to its stderr (its workerlog)."""


def install_stack_dump() -> None:
    """faulthandler's C-level handler: it writes the stacks even while the main thread is stuck in a C call
    (a collective), where a Python-level handler would never run."""
    faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


class Progress:
    """One rank's progress file; `beat()` after each step. Disabled (every call a no-op) without a folder."""

    def __init__(self, folder: Optional[str], rank: int) -> None:
        self.folder, self.rank = folder, rank
        self.path = os.path.join(folder, f"rank{rank}.json") if folder else None

    @classmethod
    def from_env(cls, env: Mapping[str, str], rank: int) -> "Progress":
        folder = env.get(PROGRESS_DIR_ENV)
        return cls(folder if folder and os.path.isdir(folder) else None, rank)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def beat(self, where: str, busy: bool = False) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"rank": self.rank, "pid": os.getpid(), "where": where, "busy": busy}, f)
            os.replace(tmp, self.path)  # the reader never sees half a file
        except OSError:
            pass  # the watchdog is an aid: a full /tmp must not fail the training


@dataclass(frozen=True)
class Report:
    """A rank's last report as the supervisor reads it."""
    rank: int
    pid: int
    where: str
    busy: bool
    at: float
    """Wall-clock time of the report (the file's modification time)."""


def read_reports(folder: str) -> list[Report]:
    """Every rank's last report in `folder`, by rank; files being replaced or malformed are skipped."""
    reports = []
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        path = os.path.join(folder, name)
        try:
            at = os.stat(path).st_mtime
            with open(path) as f:
                data = json.load(f)
            reports.append(Report(int(data["rank"]), int(data["pid"]), str(data["where"])[:200],
                                  bool(data["busy"]), at))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(reports, key=lambda r: r.rank)

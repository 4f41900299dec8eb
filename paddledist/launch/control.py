"""A supervisor's private folder shared with its own workers, named to them in PADDLEDIST_CONTROL.

Preemption needs a word from the supervisor to its ranks and one back, on the same machine: the supervisor
creates `preempt` (a signal came here, or a peer relayed one); each rank looks for it at step boundaries
(engine.checkpoint_hooks.PreemptHook: one stat call, then the ranks agree through one small all-reduce), saves, and
creates `saved` before it exits 0, so the supervisor knows the clean end was a preemption. Files, not
signals: paddle's launcher sits between the two and treats signals itself. The folder lives in the local
temporary directory, never in Global.output.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Optional


CONTROL_VAR = "PADDLEDIST_CONTROL"
RESTARTS_VAR = "PADDLEDIST_RESTARTS"
"""The restarts so far (JSON list of {"cause", "epoch"}), for rank 0's train_result.json."""
MACHINE_VAR = "PADDLEDIST_MACHINE"
"""This machine as its supervisor planned it (JSON {"host", "nic", "device"}), for the run report's cluster view."""


def preempt_flag(folder: str) -> str:
    return os.path.join(folder, "preempt")


def saved_flag(folder: str) -> str:
    return os.path.join(folder, "saved")


def restarts_from(env) -> list:
    """What the supervisor passed in RESTARTS_VAR; [] when absent or not a list."""
    try:
        value = json.loads(env.get(RESTARTS_VAR, "[]"))
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def machine_from(env) -> dict:
    """What the supervisor passed in MACHINE_VAR; {} when absent or not an object."""
    try:
        value = json.loads(env.get(MACHINE_VAR, "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Control:
    """The folder, created on entry and removed on exit."""

    def __enter__(self) -> "Control":
        self.folder = tempfile.mkdtemp(prefix="paddledist-control-")
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def env(self, restarts: list, machine: Optional[dict] = None) -> dict[str, str]:
        return {CONTROL_VAR: self.folder, RESTARTS_VAR: json.dumps(restarts), MACHINE_VAR: json.dumps(machine or {})}

    def request(self) -> None:
        open(preempt_flag(self.folder), "a").close()

    def requested(self) -> bool:
        return os.path.exists(preempt_flag(self.folder))

    def saved(self) -> bool:
        return os.path.exists(saved_flag(self.folder))

    def reset(self) -> None:
        for path in (preempt_flag(self.folder), saved_flag(self.folder)):
            if os.path.exists(path):
                os.remove(path)

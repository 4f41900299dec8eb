"""Finding and ending every process a launch started. paddle's launcher puts each worker in its own session
(os.setsid), so ending the launcher's process group alone would leave the workers running."""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable


def descendant_groups(root: int) -> set[int]:
    """Process groups of `root` and all its descendants (Linux /proc), except our own group."""
    children: dict[int, list[int]] = {}
    groups: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat:
                children.setdefault(stat[0], []).append(int(entry))
                groups[int(entry)] = stat[1]
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in groups:
            found.add(groups[pid])
        todo.extend(children.get(pid, ()))
    return found - {os.getpgrp()}


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, pgrp) from /proc/<pid>/stat; the command name may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def end_groups(groups: Iterable[int], grace_s: float = 5.0) -> None:
    """SIGTERM every group, wait up to `grace_s` for them to go, then SIGKILL what is left."""
    alive = _signal(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = _signal(alive, 0)
    _signal(alive, signal.SIGKILL)


def _signal(groups: Iterable[int], sig: int) -> set[int]:
    """Send `sig` to each group; return the groups that still exist."""
    alive = set()
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
            alive.add(pgid)
        except ProcessLookupError:
            pass
        except PermissionError:  # group now belongs to someone else (pid reuse): not ours to end
            pass
    return alive

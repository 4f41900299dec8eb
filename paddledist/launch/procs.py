"""Finding (psutil) and ending every process a launch started.

paddle's launcher puts each worker in its own session (os.setsid), so ending the launcher's process group
alone would leave the workers running; and a launcher that dies first orphans them. The runner therefore
becomes a child subreaper (orphans re-parent to it), records the process group of everything below the
launcher while it runs, and ends all of those groups at the end.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Callable, Iterable

import psutil

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper(on: bool = True) -> None:
    """Orphaned descendants re-parent to this process instead of init, so they stay findable."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgrp) for every process (psutil for the walk; the group from os.getpgid)."""
    table = {}
    for proc in psutil.process_iter(["ppid"]):
        try:
            table[proc.pid] = (proc.info["ppid"], os.getpgid(proc.pid))
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return table


def children(pid: int) -> set[int]:
    return {child for child, (ppid, _) in _table().items() if ppid == pid}


def descendants(roots: Iterable[int]) -> dict[int, int]:
    """pid -> pgrp of the roots and everything below them."""
    table = _table()
    below: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        below.setdefault(ppid, []).append(pid)
    found, todo = {}, list(roots)
    while todo:
        pid = todo.pop()
        if pid in table and pid not in found:
            found[pid] = table[pid][1]
            todo.extend(below.get(pid, ()))
    return found


def end_groups(groups: Iterable[int], reap: Callable[[], None], grace_s: float = 5.0) -> None:
    """SIGTERM every group, wait up to `grace_s` for them to go (reaping our zombies), then SIGKILL the rest."""
    groups = set(groups) - {os.getpgrp()}
    alive = _signal(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        reap()
        alive = _signal(alive, 0)
    _signal(alive, signal.SIGKILL)
    reap()


def reap(pids: Iterable[int]) -> None:
    """Collect exited children among `pids` (orphans adopted as subreaper) so they do not linger as zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _signal(groups: Iterable[int], sig: int) -> set[int]:
    """Send `sig` to each group; return the groups that still exist."""
    alive = set()
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
            alive.add(pgid)
        except (ProcessLookupError, PermissionError):  # gone, or the id now belongs to someone else
            pass
    return alive

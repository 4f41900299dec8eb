"""Every text of paddle's (launcher lines, gloo's error strings) and of our own that the runner matches, in one
place. tests/test_paddle_texts.py pins them against the real launcher's output, so a paddle upgrade that
rewords them fails there instead of silently disabling the runner's diagnosis."""

from __future__ import annotations

import re
from typing import Iterable, Optional

RANK_FAILED = re.compile(r"Container rank (\d+) status failed cmd .* code (-?\d+) log (\S+)")
"""paddle.distributed.launch (controllers/controller.py watch) when a local rank exits non-zero."""

COLLECTIVE_BREAK = ("gloo::IoException", "gloo::TimeoutException", "Connection reset by peer",
                    "Connection closed by peer", "gloo/transport/tcp/pair.cc")
"""In a failed rank's log: it failed because a peer vanished or went silent, not for a reason of its own
(measured with gloo on CPU; NCCL's messages are not recognised, so GPU ranks count as failing on their own).
Any error raised from gloo's TCP pair is its transport to a peer failing, e.g. a barrier across namespace hosts
whose peer died: "[.../gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 1 pair_rank = 0"."""

OWN_ERROR = "paddledist: error: "
"""How paddledist.cli prints a rank's one-line error (a user error, a failed write such as a full disk)."""


def rank_failed(line: str) -> Optional[tuple[int, int, str]]:
    """(local rank, exit code, log path) when `line` is the launcher's failed-rank line."""
    match = RANK_FAILED.search(line)
    return (int(match[1]), int(match[2]), match[3]) if match else None


def collective_broke(lines: Iterable[str]) -> bool:
    return any(marker in line for line in lines for marker in COLLECTIVE_BREAK)


def own_error(lines: Iterable[str]) -> Optional[str]:
    """The last one-line error paddledist printed in a rank's log, without the prefix."""
    found = [line.split(OWN_ERROR, 1)[1].strip() for line in lines if OWN_ERROR in line]
    return found[-1] if found else None

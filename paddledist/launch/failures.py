"""Why a launch failed, told once: which local ranks failed and how (paddle's launcher names them in its
output; each one's workerlog tail), whether they failed on their own or because their collectives broke, and,
with the other machines in etcd, whom to blame and whom to tell."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence, TextIO

from paddledist.cluster import ClusterPlan
from paddledist.launch import paddle_texts


class PeerLinks(Protocol):
    """The other machines' supervisors (cluster.liveness.EtcdPeers): why to stop, whom to blame, whom to tell."""

    def check(self) -> Optional[str]: ...

    def explain(self, wait_s: float) -> Optional[str]: ...

    def tell(self, reason: str) -> None: ...

    def failed(self, reason: Optional[str]) -> None: ...

    def finish(self) -> Optional[str]: ...


BLAME_WAIT_S = 15.0
"""After local ranks failed because their collectives broke: how long to wait for word of the cause elsewhere
(a node whose rank failed on its own tells it once paddle's launcher there has noticed and exited, which took
over 5 s on a loaded machine; a lost node is known at once, so this wait only runs out when no one knows)."""



@dataclass
class Seen:
    """What the output reader noticed: failed local ranks with exit code and log file. `offsets`: the size of
    each file in the launch's --log_dir when it started; paddle's launcher appends to a workerlog, so what an
    earlier launch (before a restart) wrote there is no part of this one's failure."""
    failed: dict[int, tuple[int, str]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)

    def tail(self, log: str, lines: int = 20) -> list[str]:
        return tail(log, lines, since=self.offsets.get(os.path.abspath(log), 0))


def log_sizes(argv: Sequence[str]) -> dict[str, int]:
    """{absolute path: size} of the files already in the launcher's --log_dir, if it names one."""
    argv = list(argv)
    if "--log_dir" not in argv[:-1]:
        return {}
    folder, sizes = os.path.abspath(argv[argv.index("--log_dir") + 1]), {}
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            sizes[path] = os.path.getsize(path)
    return sizes


def report(code: int, reason: Optional[str], signum: int, seen: Seen, plan: ClusterPlan, err: TextIO,
            peers: Optional[PeerLinks]) -> tuple[int, Optional[str], Optional[str]]:
    """Print why this launch ended; (exit code, a cause the other machines have not been told yet or None, the
    cause in one line)."""
    here = plan.who()
    if signum:
        print(f"paddledist: stopped by signal {signum}; ended every process of this launch", file=err, flush=True)
        return 128 + signum, f"stopped by signal {signum} on {here}", f"stopped by signal {signum} on {here}"
    if reason:
        print(f"paddledist: stopping the job: {reason}; ended every process of this launch on {here}",
              file=err, flush=True)
        return 1, None if peers and reason == peers.check() else reason, reason
    if code == 0 and not seen.failed:
        return 0, None, None
    blame = _blame(seen, plan, code, peers)
    if blame:
        print(f"paddledist: stopping the job: {blame}; the failures below on {here} follow from it",
              file=err, flush=True)
    for local_rank, (rank_code, log) in sorted(seen.failed.items()):
        print(_rank_failure(plan, local_rank, rank_code, log, seen), file=err, flush=True)
    if peers and not blame and peers.check():
        print(f"paddledist: meanwhile: {peers.check()}", file=err, flush=True)
    if not seen.failed:
        print(f"paddledist: paddle.distributed.launch exited with code {code} on {here}; see its output above",
              file=err, flush=True)
    exit_code = code if code > 0 else (128 - code if code < 0 else 1)
    return exit_code, None, blame or _summary(_own(seen), plan, code, seen)


def _blame(seen: Seen, plan: ClusterPlan, code: int, peers: Optional[PeerLinks]) -> Optional[str]:
    """Whom to blame for this launch's failed ranks, telling the other machines when the cause is here.
    Ranks that failed for a reason of their own (a traceback, a signal such as the OOM killer's) are the
    cause: the others hear of it at once, unless word of a lost peer came first. Ranks whose collectives
    broke wait briefly for word of the cause elsewhere (a peer lost, or its ranks failing on their own)."""
    if peers is None:
        return None
    own = _own(seen)
    if seen.failed and not own:
        return peers.explain(BLAME_WAIT_S)
    blame = peers.explain(0)
    if not blame:
        peers.tell(_summary(own, plan, code, seen))
    return blame


def _own(seen: Seen) -> list:
    """The local ranks that failed for a reason of their own, not because their collectives broke."""
    return [(r, c, log) for r, (c, log) in sorted(seen.failed.items()) if not _collective_broke(log, seen)]


def _summary(own: list, plan: ClusterPlan, code: int, seen: Seen) -> str:
    """What to tell the other machines: the first rank that failed on its own, else the launcher's exit."""
    here = plan.who()
    if not own:
        return f"paddle.distributed.launch exited with code {code} on {here}"
    local_rank, rank_code, log = own[0]
    error = paddle_texts.own_error(seen.tail(log, lines=400))  # e.g. a full disk: the other machines read the cause
    said = f": {error}" if error else ""
    return f"rank {plan.ranks[0] + local_rank} failed with exit code {rank_code}{said} (log: {log} on {here})"


def _collective_broke(log: str, seen: Seen) -> bool:
    return paddle_texts.collective_broke(seen.tail(log, lines=400))


def _rank_failure(plan: ClusterPlan, local_rank: int, code: int, log: str, seen: Seen) -> str:
    rank = plan.ranks[0] + local_rank
    head = (f"paddledist: rank {rank} (local rank {local_rank} on node {plan.node_rank}, {plan.host}) "
            f"failed with exit code {code}; last lines of {log}:")
    return "\n".join([head, *("    " + line for line in seen.tail(log))])


def tail(path: str, lines: int = 20, max_bytes: int = 64 * 1024, since: int = 0) -> list[str]:
    """The last `lines` lines of `path` (of its last `max_bytes`, and of what follows byte `since`)."""
    try:
        with open(path, "rb") as f:
            size = os.path.getsize(path)
            f.seek(max(size - max_bytes, since if since <= size else 0, 0))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return [f"(cannot read it: {e.strerror})"]
    return text.splitlines()[-lines:]

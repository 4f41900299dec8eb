"""run(argv, env, ...): start paddle's launcher, stream its output, and end everything it started.

The runner polls: every `interval_s` it records the process groups below the launcher and asks each
watcher, and the other machines' heartbeat links (`peers`), whether the job must stop. On a failed rank it
names the rank, its node and the tail of its workerlog, and first the machine that caused it, if any; a rank
that failed on its own is told to the other machines at once. SIGINT/SIGTERM/exit end every process the launch
started; with a `Preemption`, SIGTERM and SIGUSR1 instead ask the ranks to save and leave (a second one ends
everything at once).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Protocol, Sequence, TextIO

from paddledist.cluster import ClusterPlan
from paddledist.launch import paddle_texts, procs

Watcher = Callable[[], Optional[str]]
"""Polled while the job runs; a returned message stops the job and is reported."""


class PeerLinks(Protocol):
    """The other machines' supervisors (cluster.heartbeat.Peers): why to stop, whom to blame, whom to tell."""

    def check(self) -> Optional[str]: ...

    def explain(self, wait_s: float) -> Optional[str]: ...

    def tell(self, reason: str) -> None: ...

    def failed(self, reason: Optional[str]) -> None: ...

    def finish(self) -> Optional[str]: ...


BLAME_WAIT_S = 15.0
"""After local ranks failed because their collectives broke: how long to wait for word of the cause elsewhere
(a node whose rank failed on its own tells it once paddle's launcher there has noticed and exited, which took
over 5 s on a loaded machine; a lost node is known at once, so this wait only runs out when no one knows)."""



@dataclass(frozen=True)
class Ended:
    """How one launch ended: the exit code, and why in one line (None when it succeeded)."""
    code: int
    cause: Optional[str] = None
    signalled: bool = False
    """A signal to this supervisor ended it (not a failure of the job: not worth a restart)."""


@dataclass(frozen=True)
class Preemption:
    """SIGTERM/SIGUSR1 to this supervisor: `request(why)` asks every rank to save at the next step and exit; past
    `grace_s` seconds the job is ended without that checkpoint."""
    request: Callable[[str], None]
    grace_s: float


@dataclass
class _Seen:
    """What the output reader noticed: failed local ranks with exit code and log file. `offsets`: the size of
    each file in the launch's --log_dir when it started; paddle's launcher appends to a workerlog, so what an
    earlier launch (before a restart) wrote there is no part of this one's failure."""
    failed: dict[int, tuple[int, str]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)

    def tail(self, log: str, lines: int = 20) -> list[str]:
        return tail(log, lines, since=self.offsets.get(os.path.abspath(log), 0))


def _log_sizes(argv: Sequence[str]) -> dict[str, int]:
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


def run(argv: Sequence[str], env: Mapping[str, str], plan: ClusterPlan, watchers: Sequence[Watcher] = (),
        interval_s: float = 0.5, out: Optional[TextIO] = None, err: Optional[TextIO] = None,
        peers: Optional[PeerLinks] = None) -> int:
    """Run the launcher to the end; the exit code is non-zero if any local rank failed or a watcher fired.
    Output goes to `out`/`err`, by default the sys.stdout/sys.stderr of the moment. `peers`: the other
    machines, watched like a watcher, told how this machine ended, and asked whom to blame for a failure."""
    return run_to_end(argv, env, plan, watchers, interval_s, out, err, peers).code


def run_to_end(argv: Sequence[str], env: Mapping[str, str], plan: ClusterPlan, watchers: Sequence[Watcher] = (),
               interval_s: float = 0.5, out: Optional[TextIO] = None, err: Optional[TextIO] = None,
               peers: Optional[PeerLinks] = None, preemption: Optional[Preemption] = None) -> Ended:
    """`run`, returning the cause with the code (for launch_stage's restarts), and handling `preemption`."""
    out, err = out or sys.stdout, err or sys.stderr
    watchers = [*watchers, peers.check] if peers else list(watchers)
    tree, seen = _Tree(), _Seen(offsets=_log_sizes(argv))
    procs.become_subreaper()
    proc = subprocess.Popen(list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_die_with_parent())
    reader = threading.Thread(target=_pump, args=(proc.stdout, out, seen), daemon=True)
    reader.start()
    stop = _Stop(preemption)
    with stop:
        try:
            reason = _supervise(proc, tree, watchers, interval_s, stop)
        finally:
            tree.end(proc)
            procs.become_subreaper(False)
            reader.join(timeout=5)
    code, tell, cause = _report(proc.returncode, reason, stop.signum, seen, plan, err, peers)
    if peers and code:
        peers.failed(tell)
    elif peers:
        elsewhere = peers.finish()  # exit 0 only once the whole job succeeded
        if elsewhere:
            print(f"paddledist: the ranks on node {plan.node_rank} ({plan.host}) finished, but the job failed: "
                  f"{elsewhere}", file=err, flush=True)
            code, cause = 1, elsewhere
    return Ended(code, cause if code else None, signalled=bool(stop.signum))


class _Tree:
    """The processes of one launch: the launcher, everything below it, and orphans re-parented to us."""

    def __init__(self) -> None:
        self._before = procs.children(os.getpid())
        self.pgids: dict[int, int] = {}

    def refresh(self, proc: subprocess.Popen) -> None:
        adopted = procs.children(os.getpid()) - self._before
        self.pgids.update(procs.descendants(adopted | {proc.pid}))

    def end(self, proc: subprocess.Popen) -> None:
        self.refresh(proc)
        others = [pid for pid in self.pgids if pid != proc.pid]  # Popen reaps the launcher itself
        procs.end_groups({proc.pid, *self.pgids.values()}, reap=lambda: (proc.poll(), procs.reap(others)))
        proc.wait()


def _die_with_parent() -> Callable[[], None]:
    """A preexec_fn asking Linux to SIGTERM the launcher if this process dies (even by SIGKILL), and ignoring
    SIGUSR1 in the launcher and (inherited through exec) its workers: it is this supervisor's preemption request,
    and Slurm's `scancel --signal=USR1` or `srun` deliver it to every process of the step, which it would kill."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: the child only calls it
    except (OSError, AttributeError):
        prctl = None

    def child() -> None:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        if prctl is not None:
            prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG

    return child


def _supervise(proc: subprocess.Popen, tree: _Tree, watchers: Sequence[Watcher], interval_s: float,
               stop: "_Stop") -> Optional[str]:
    while proc.poll() is None:
        tree.refresh(proc)
        if stop.signum:
            return None
        late = stop.preempt()
        if late:
            return late
        for watch in watchers:
            message = watch()
            if message:
                return message
        time.sleep(interval_s)
    return None


def _pump(stream, out: TextIO, seen: _Seen) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        out.write(line)
        out.flush()
        failed = paddle_texts.rank_failed(line)
        if failed:
            seen.failed[failed[0]] = failed[1:]


def _report(code: int, reason: Optional[str], signum: int, seen: _Seen, plan: ClusterPlan, err: TextIO,
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


def _blame(seen: _Seen, plan: ClusterPlan, code: int, peers: Optional[PeerLinks]) -> Optional[str]:
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


def _own(seen: _Seen) -> list:
    """The local ranks that failed for a reason of their own, not because their collectives broke."""
    return [(r, c, log) for r, (c, log) in sorted(seen.failed.items()) if not _collective_broke(log, seen)]


def _summary(own: list, plan: ClusterPlan, code: int, seen: _Seen) -> str:
    """What to tell the other machines: the first rank that failed on its own, else the launcher's exit."""
    here = plan.who()
    if not own:
        return f"paddle.distributed.launch exited with code {code} on {here}"
    local_rank, rank_code, log = own[0]
    error = paddle_texts.own_error(seen.tail(log, lines=400))  # e.g. a full disk: the other machines read the cause
    said = f": {error}" if error else ""
    return f"rank {plan.ranks[0] + local_rank} failed with exit code {rank_code}{said} (log: {log} on {here})"


def _collective_broke(log: str, seen: _Seen) -> bool:
    return paddle_texts.collective_broke(seen.tail(log, lines=400))


def _rank_failure(plan: ClusterPlan, local_rank: int, code: int, log: str, seen: _Seen) -> str:
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


class _Stop:
    """SIGINT/SIGTERM only set a flag; the poll loop then ends the processes and reports. With a preemption,
    the first SIGTERM/SIGUSR1 is a request to save and leave, passed on by the poll loop (not in the handler:
    it takes the heartbeat lock the interrupted code may hold)."""

    def __init__(self, preemption: Optional[Preemption] = None) -> None:
        self.signum = 0
        self.preemption = preemption
        self._asked = 0
        """The preemption signal received, 0 before."""
        self._since: Optional[float] = None

    def preempt(self) -> Optional[str]:
        """Called by the poll loop: pass a new request on; past the grace, why the job must end now."""
        if self._asked and self._since is None:
            self._since = time.monotonic()
            self.preemption.request(f"signal {self._asked}")
        if self._since is not None and time.monotonic() - self._since > self.preemption.grace_s:
            return (f"the ranks did not save and leave within Train.preempt_grace={self.preemption.grace_s:g}s of "
                    f"the preemption signal {self._asked}; latest is the last complete checkpoint")
        return None

    def __enter__(self) -> "_Stop":
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            wanted = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGUSR1,) if self.preemption else ())
            for sig in wanted:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.preemption and signum != signal.SIGINT and not self._asked:
            self._asked = signum
        else:
            self.signum = signum

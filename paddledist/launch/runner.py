"""run(argv, env, ...): start paddle's launcher, stream its output, and end everything it started.

The runner polls: every `interval_s` it records the process groups below the launcher and asks each
watcher, and the other machines in etcd (`peers`), whether the job must stop. On a failed rank it
names the rank, its node and the tail of its workerlog (failures.py), and first the machine that caused it; a rank
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
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, TextIO

from paddledist.cluster import ClusterPlan
from paddledist.launch import paddle_texts, procs
from paddledist.launch.failures import BLAME_WAIT_S, PeerLinks, Seen, log_sizes, report

__all__ = ["BLAME_WAIT_S", "Ended", "PeerLinks", "Preemption", "run", "run_to_end"]

Watcher = Callable[[], Optional[str]]
"""Polled while the job runs; a returned message stops the job and is reported."""


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
    tree, seen = _Tree(), Seen(offsets=log_sizes(argv))
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
    code, tell, cause = report(proc.returncode, reason, stop.signum, seen, plan, err, peers)
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


def _pump(stream, out: TextIO, seen: Seen) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        out.write(line)
        out.flush()
        failed = paddle_texts.rank_failed(line)
        if failed:
            seen.failed[failed[0]] = failed[1:]


class _Stop:
    """SIGINT/SIGTERM only set a flag; the poll loop then ends the processes and reports. With a preemption,
    the first SIGTERM/SIGUSR1 is a request to save and leave, passed on by the poll loop (not in the handler:
    it takes the peers' lock the interrupted code may hold)."""

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

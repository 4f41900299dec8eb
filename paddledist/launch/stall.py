"""The stall watchdog (after Horovod's stall inspector): a job whose ranks all stopped finishing steps while
every process is alive is stopped on every machine, naming the ranks, with each rank's Python stack in its
workerlog.

Workers rewrite a progress file after every step (runfiles/progress.py). Counting from the first report and
never during a `busy` phase (unless a process is stopped), when no local rank reported for
Train.stall_timeout seconds every local rank dumps its stack (faulthandler on SIGUSR2; a stopped one is
continued to do it). A stopped process here is the cause, told to the other machines at once; otherwise this
machine waits briefly for word of a cause elsewhere, else names its own ranks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from typing import Iterator, Mapping, Optional, Sequence

import psutil

from paddledist.cluster import ClusterPlan
from paddledist.runfiles.progress import PROGRESS_DIR_ENV, STACK_SIGNAL, Report, read_reports

STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
DUMP_WAIT_MAX_S = 10.0
"""The longest wait for the signalled ranks to write their stacks (a fixed second was not enough on a loaded
machine: the job was ended half-way through a dump); most take milliseconds."""
BLAME_WAIT_S = 5.0
"""How long ranks that are merely waiting wait for word of a cause on another machine."""


@contextlib.contextmanager
def watching(stall_timeout: Optional[float], plan: ClusterPlan, log_dir: str, env: Mapping[str, str],
             peers=None) -> Iterator[tuple[dict, list]]:
    """(the launcher's environment with the progress folder, [the watchdog]) for one launch; nothing with
    Train.stall_timeout 0 or null. The folder is local (a temporary directory) and removed afterwards."""
    if not stall_timeout:
        yield dict(env), []
        return
    folder = tempfile.mkdtemp(prefix="paddledist-progress-")
    try:
        yield {**env, PROGRESS_DIR_ENV: folder}, [StallWatch(folder, stall_timeout, plan, log_dir, peers)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class StallWatch:
    """A runner watcher: None while the ranks advance; else, once, why the job must stop."""

    def __init__(self, folder: str, timeout_s: float, plan: ClusterPlan, log_dir: str, peers=None,
                 clock=time.time) -> None:
        self.folder, self.timeout_s, self.plan, self.log_dir = folder, timeout_s, plan, log_dir
        self.peers, self.clock = peers, clock

    def __call__(self) -> Optional[str]:
        reports = read_reports(self.folder)
        if not reports or self.clock() - max(r.at for r in reports) < self.timeout_s:
            return None
        idle = self.clock() - max(r.at for r in reports)
        states = {r.rank: _state(r.pid) for r in reports}
        if any(s is None for s in states.values()):
            return None  # a rank ended: the runner's failure path names it
        stopped = [r for r in reports if states[r.rank] in STOPPED]
        if not stopped and any(r.busy for r in reports):
            return None  # a long evaluation or checkpoint write; a stopped rank stalls it too
        dump_stacks(reports, stopped)
        if stopped:
            message = self._stopped(stopped, idle)
            if self.peers:
                self.peers.tell(message)  # the cause is here: the others' ranks only wait for these
            return message
        blame = self.peers.explain(BLAME_WAIT_S) if self.peers else None
        return blame or self._waiting(reports, idle)

    def _here(self) -> str:
        return self.plan.who()

    def _name(self, r: Report) -> str:
        return f"rank {r.rank} (local rank {self._local(r)} on {self._here()}, pid {r.pid}, last report: {r.where})"

    def _local(self, r: Report) -> int:
        return r.rank - self.plan.ranks[0]

    def _idle(self, idle: float) -> str:
        return f"no rank on {self._here()} finished a step for {idle:.0f}s (Train.stall_timeout={self.timeout_s:g}s)"

    def _stopped(self, stopped: Sequence[Report], idle: float) -> str:
        logs = ", ".join(self._log(r) for r in stopped)
        names = "; ".join(self._name(r) for r in stopped)
        return (f"stalled: {names} stopped advancing: its process was stopped (SIGSTOP or a debugger; continued "
                f"to write its Python stack); {self._idle(idle)}; stacks in {logs}")

    def _waiting(self, reports: Sequence[Report], idle: float) -> str:
        names = "; ".join(self._name(r) for r in reports)
        return (f"stalled: {self._idle(idle)} while every process is alive (a collective deadlocked or a rank "
                f"is stuck): {names}; Python stacks in {os.path.join(self.log_dir, 'workerlog.*')}")

    def _log(self, r: Report) -> str:
        return os.path.join(self.log_dir, f"workerlog.{self._local(r)}")


def _state(pid: int) -> Optional[str]:
    """psutil's status of a live process; None when it is gone or a zombie."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    return None if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else status


def dump_stacks(reports: Sequence[Report], stopped: Sequence[Report]) -> None:
    """STACK_SIGNAL to every rank; a stopped one is continued after it (the pending signal runs on waking).
    Returns once every rank has run faulthandler's handler: the signal neither pending nor blocked by a thread
    that did not block it before (the handler blocks its own signal while it writes)."""
    before = {r.pid: _signal_masks(r.pid, STACK_SIGNAL)[1] for r in reports}
    for r in reports:
        with contextlib.suppress(OSError):
            os.kill(r.pid, STACK_SIGNAL)
    for r in stopped:
        with contextlib.suppress(OSError):
            os.kill(r.pid, signal.SIGCONT)
    def handled(r: Report) -> bool:
        pending, blocking = _signal_masks(r.pid, STACK_SIGNAL)
        return not pending and blocking <= before[r.pid]

    deadline = time.monotonic() + DUMP_WAIT_MAX_S
    while time.monotonic() < deadline and not all(handled(r) for r in reports):
        time.sleep(0.05)


def _signal_masks(pid: int, sig: int) -> tuple[bool, set[int]]:
    """(whether `sig` waits to be delivered to process `pid`, the threads that block it), from Linux's /proc;
    elsewhere, or for a process that is gone: (False, empty)."""
    bit, pending, blocking = 1 << (sig - 1), False, set()
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                pending |= bool((int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)) & bit)
                if int(fields["SigBlk"], 16) & bit:
                    blocking.add(int(tid))
    return pending, blocking

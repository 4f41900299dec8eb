"""The stall watchdog (launch/stall.py) on real processes: a rank reporting through runfiles/progress.py, then
blocked, stopped (SIGSTOP), busy or gone; and a real two-host job (network-namespace hosts) in which one rank is
stopped mid-step: every host ends within Train.stall_timeout + 15 s, naming that rank, with its stack in its
workerlog. Skips the two-host case where namespaces cannot be made.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from paddledist.cluster import ClusterPlan
from paddledist.config.device import DeviceSpec
from paddledist.runfiles.progress import PROGRESS_DIR_ENV, Progress, read_reports
from paddledist.launch.stall import StallWatch, watching

REPO = Path(__file__).resolve().parent.parent

# A "rank": reports a few steps, then blocks inside a function whose name the stack dump must show.
# "late": the stack signal is held back for LATE_S seconds (as a loaded machine may run the handler late).
RANK = textwrap.dedent("""
    import os, signal, sys, time
    from paddledist.runfiles.progress import STACK_SIGNAL, Progress, install_stack_dump
    install_stack_dump()
    progress = Progress.from_env(os.environ, int(sys.argv[1]))
    for step in range(3):
        progress.beat(f"after epoch 1 step {step + 1}/9", busy=sys.argv[2] == "busy" and step == 2)
    held = sys.argv[2] == "late"
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, {STACK_SIGNAL})
    start = time.monotonic()
    def blocked_inside_a_step():
        while True:
            time.sleep(0.05)
            if held and time.monotonic() - start > float(sys.argv[3]):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {STACK_SIGNAL})
    print("ready", flush=True)
    blocked_inside_a_step()
""")


LATE_S = 4.0


def plan(node: int = 0) -> ClusterPlan:
    """Node `node` of two, one rank each (so rank = node)."""
    return ClusterPlan(nodes=("10.0.0.1", "10.0.0.2"), node_rank=node, ifname="lo", device=DeviceSpec("cpu", (0,)),
                       port=6170, job_id="t", peer_timeout=5, source="test")


def start_rank(folder: Path, tmp_path: Path, rank: int, mode: str = "steps") -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"workerlog.{rank}"
    env = {**os.environ, PROGRESS_DIR_ENV: str(folder), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", RANK, str(rank), mode, str(LATE_S)], env=env, stdout=subprocess.PIPE,
                            stderr=open(log, "w"), text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, log


def wait_for(watch: StallWatch, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = watch()
        if message:
            return message
        time.sleep(0.1)
    raise AssertionError(f"no stall reported within {timeout}s")


@pytest.mark.unit
def test_progress_files_round_trip_and_a_missing_folder_disables(tmp_path):
    Progress(str(tmp_path), 3).beat("epoch 2 step 5/9", busy=True)
    (tmp_path / "rank4.json").write_text("{half a fi")  # being replaced: skipped, not fatal
    [report] = read_reports(str(tmp_path))
    assert (report.rank, report.pid, report.where, report.busy) == (3, os.getpid(), "epoch 2 step 5/9", True)
    assert not Progress.from_env({PROGRESS_DIR_ENV: str(tmp_path / "gone")}, 0).enabled
    assert not Progress.from_env({}, 0).enabled


@pytest.mark.unit
def test_watching_makes_a_folder_per_launch_and_nothing_when_off(tmp_path):
    with watching(0, plan(), str(tmp_path), {"A": "1"}) as (env, watchers):
        assert env == {"A": "1"} and watchers == []
    with watching(None, plan(), str(tmp_path), {}) as (env, watchers):
        assert watchers == []
    with watching(30, plan(), str(tmp_path), {"A": "1"}) as (env, watchers):
        folder = env[PROGRESS_DIR_ENV]
        assert os.path.isdir(folder) and env["A"] == "1" and len(watchers) == 1
    assert not os.path.exists(folder)


@pytest.mark.multiproc
def test_a_blocked_rank_is_named_with_its_stack_only_after_the_timeout(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    watch = StallWatch(str(folder), 1.0, plan(), str(tmp_path))
    assert watch() is None  # nothing reported yet (start-up): never a stall
    proc, log = start_rank(folder, tmp_path, 0)
    try:
        assert watch() is None  # it just reported
        message = wait_for(watch, 5)
        assert "stalled: no rank on node 0 (10.0.0.1) finished a step for" in message, message
        assert "while every process is alive" in message
        assert (f"rank 0 (local rank 0 on node 0 (10.0.0.1), pid {proc.pid}, last report: after epoch 1 step 3/9)"
                in message)
        assert "in blocked_inside_a_step" in log.read_text()
    finally:
        proc.kill()
        proc.wait()
    assert watch() is None  # the rank is gone: the runner's failure path reports that, not the watchdog


@pytest.mark.multiproc
def test_a_stopped_rank_is_named_as_stopped_and_continued_to_dump_its_stack(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    proc, log = start_rank(folder, tmp_path, 1, mode="busy")  # stopped even inside a busy phase
    p = plan(node=1)
    watch = StallWatch(str(folder), 1.0, p, str(tmp_path))
    try:
        time.sleep(1.2)
        assert watch() is None  # busy (an evaluation, a checkpoint) and running: not a stall
        os.kill(proc.pid, signal.SIGSTOP)
        message = wait_for(watch, 5)
        assert message.startswith(f"stalled: rank 1 (local rank 0 on node 1 (10.0.0.2), pid {proc.pid}, last "
                                  "report: after epoch 1 step 3/9) stopped advancing: its process was stopped"), message
        assert f"stacks in {tmp_path / 'workerlog.0'}" in message
        assert "in blocked_inside_a_step" in log.read_text()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.multiproc
def test_the_job_is_ended_only_after_a_late_stack_dump_is_written(tmp_path):
    """A rank that runs the stack handler LATE_S seconds after the signal: the watchdog waits for it (it once
    waited a fixed second, and the job's end cut a dump on a loaded machine half-way)."""
    folder = tmp_path / "progress"
    folder.mkdir()
    proc, log = start_rank(folder, tmp_path, 0, mode="late")
    watch = StallWatch(str(folder), 1.0, plan(), str(tmp_path))
    try:
        started = time.monotonic()
        assert wait_for(watch, 5 + LATE_S).startswith("stalled: no rank on node 0")
        assert time.monotonic() - started >= LATE_S - 0.5
        assert "in blocked_inside_a_step" in log.read_text()
    finally:
        proc.kill()
        proc.wait()


SHORT = 2.5
VAL_COPIES = (20, 80, 320)
"""The digits' val list this many times over: an evaluation of several seconds (steps of ~0.1 s); a fast
machine gets the next, longer list, so the evaluation always outlasts Train.stall_timeout."""


def _train_with_a_long_evaluation(tmp_path, copies: int) -> tuple[subprocess.CompletedProcess, str, int]:
    """(the run, rank 0's log, seconds the first evaluation took) with the val list `copies` times over."""
    data, out = tmp_path / f"data{copies}", f"out{copies}"
    data.mkdir()
    (data / "images").symlink_to(REPO / "dataset" / "digits" / "images")
    for name in ("label.txt", "train.txt"):
        (data / name).write_text((REPO / "dataset" / "digits" / name).read_text())
    (data / "val.txt").write_text((REPO / "dataset" / "digits" / "val.txt").read_text() * copies)
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" /
                           "image_classification.yaml"), "-o", f"Global.output={out}", "Global.device=cpu:0,1",
                           f"Global.dataset_dir={data}", "Train.epochs_iters=2", "Train.uniform_output_enabled=false",
                           f"Train.stall_timeout={SHORT}"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (tmp_path / out / "logs" / "train.rank0.log").read_text()
    return done, log, _clock(log, "eval epoch 1:") - _clock(log, "epoch 1/2 iter 12/12")


@pytest.mark.multiproc
def test_start_up_and_epoch_ends_longer_than_the_timeout_do_not_trip_it(tmp_path):
    """Two ranks through paddle's launcher with a short Train.stall_timeout: the first step (compilation, the
    shm block) and the epoch end (a long evaluation, then the checkpoints) take longer, and the job finishes.
    (Steps themselves must stay below it: on a loaded machine some took over 1 s.)"""
    for copies in VAL_COPIES:
        done, log, evaluation = _train_with_a_long_evaluation(tmp_path, copies)
        if evaluation >= SHORT + 1.5:  # whole seconds: the evaluation outlasted the timeout
            break
    assert evaluation >= SHORT + 1.5, log[-2000:]


def _clock(log: str, text: str) -> int:
    """Seconds of the day of the log line holding `text` ([HH:MM:SS rank0] ...)."""
    [line] = [line for line in log.splitlines() if text in line]
    h, m, s = line[1:9].split(":")
    return int(h) * 3600 + int(m) * 60 + int(s)


# --- a real two-host job ----------------------------------------------------------------------------------

from helpers.netns import netns_hosts  # noqa: E402,F401  (fixture)
from helpers.failures import command, is_worker, output, pids_in, start, wait_all, wait_for_epoch  # noqa: E402

STALL_TIMEOUT = 10


@pytest.mark.multihost
def test_a_stopped_rank_ends_the_job_on_every_host_naming_it(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    procs = start(hosts, tmp_path, "stall", command(hosts, f"Train.stall_timeout={STALL_TIMEOUT}",
                                                    "Train.heartbeat_interval=1", "Train.heartbeat_timeout=60"))
    wait_for_epoch(tmp_path, 1, procs)
    [worker] = [int(pid) for pid in pids_in(hosts, 1) if is_worker(pid) and _is_rank(pid)]
    os.kill(worker, signal.SIGSTOP)
    done = wait_all(procs, timeout=STALL_TIMEOUT + 15)
    named = f"rank 1 (local rank 0 on node 1 ({hosts.addresses[1]}), pid {worker}"
    for i, (code, seconds) in done.items():
        text = output(tmp_path, "stall", i)
        assert code != 0 and seconds < STALL_TIMEOUT + 15, (i, code, seconds)
        assert "stalled: " + named in text and "its process was stopped" in text, text[-3000:]
        assert not pids_in(hosts, i), f"processes left on host {i}"
    assert f"node 1 ({hosts.addresses[1]}) stopped: stalled: {named}" in output(tmp_path, "stall", 0)
    log = (tmp_path / "host1" / "out" / "logs" / hosts.addresses[1] / "workerlog.0").read_text()
    assert "(most recent call first):" in log, log[-3000:]  # faulthandler's stack dump, not a traceback
    stack = log.split("(most recent call first):", 1)[1]
    assert "paddledist/engine/trainer.py" in stack and "in train" in stack, log[-3000:]  # inside the loop
    print(f"stall ended the job in {max(s for _, s in done.values()):.1f}s after the SIGSTOP")


def _is_rank(pid: str) -> bool:
    """The rank's own process (paddle's launcher runs paddledist/worker.py), not a helper it started."""
    try:
        return b"worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False

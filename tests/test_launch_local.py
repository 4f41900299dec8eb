"""Real processes on one machine: paddle.distributed.launch with 2 CPU workers, and the runner's supervision
(a failing rank is named, nothing survives a stop)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from paddledist.cluster import ClusterPlan
from paddledist.config import DeviceSpec
from paddledist.launch import run, runner

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "fleet_probe.py"
CONFIG = REPO / "configs" / "image_classification.yaml"
PLAN = ClusterPlan(("127.0.0.1",), 0, "lo", DeviceSpec("cpu", (0, 1)), 6170, "t", 10, "test")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(path: Path, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


# --- through the real launcher --------------------------------------------------------------------------

@pytest.mark.compat
def test_two_cpu_processes_train_through_the_real_launcher(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(CONFIG),
                           "-o", "Global.device=cpu:0,1", "Global.model=LeNet", "Train.epochs_iters=1",
                           f"Global.output={tmp_path / 'out'}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "this node = node 0 of 1 (127.0.0.1 on lo" in done.stdout
    result = json.loads((tmp_path / "out" / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (2, True)
    assert (tmp_path / "out" / "logs" / "127.0.0.1" / "workerlog.1").exists()


@pytest.mark.compat
def test_collectives_reach_every_rank(tmp_path):
    """The probe all-reduces and broadcasts: a launch that ran two unconnected processes would fail this."""
    done = subprocess.run([sys.executable, str(PROBE), "-o", "Global.device=cpu:0,1", f"Global.output={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [json.loads((tmp_path / f"probe.{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["world_size"], r["sum"]) for r in results] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert results[0]["weights"] == results[1]["weights"]


def test_a_failing_rank_is_named_with_its_node_and_log_tail(tmp_path):
    env = dict(os.environ, PROBE_FAIL_RANK="1")
    done = subprocess.run([sys.executable, str(PROBE), "-o", "Global.device=cpu:0,1", f"Global.output={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    log = tmp_path / "logs" / "127.0.0.1" / "workerlog.1"
    assert (f"rank 1 (local rank 1 on node 0, 127.0.0.1) failed with exit code 3; last lines of {log}"
            in done.stderr), done.stderr[-3000:]
    assert '"rank": 1' in done.stderr.split("last lines of", 1)[1]  # the tail of rank 1's own log


# --- supervision with a stand-in launcher: it starts a worker in its own session, as paddle's does ------

FAKE_LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    open(sys.argv[1], "w").write(str(worker.pid))
    print("launcher up", flush=True)
    if len(sys.argv) > 2:
        log = sys.argv[2]
        open(log, "w").write("step 1\\nTraceback: boom\\n" + " ".join(sys.argv[3:]) + "\\n")
        print(f"Container rank 1 status failed cmd ['python', '-u', 'x.py'] code 7 log {log}", flush=True)
        sys.exit(7)
    time.sleep(300)
""")


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_launcher.py"
    script.write_text(FAKE_LAUNCHER)
    return [sys.executable, str(script), str(tmp_path / "worker.pid")]


def test_watcher_stops_the_job_and_no_worker_survives(tmp_path, fake, capsys):
    pid_file = tmp_path / "worker.pid"
    fired = lambda: "node 2 (10.0.0.3) stopped answering" if pid_file.exists() else None  # noqa: E731
    assert run(fake, os.environ, PLAN, watchers=[fired], interval_s=0.1) == 1
    assert "stopping the job: node 2 (10.0.0.3) stopped answering" in capsys.readouterr().err
    assert not alive(int(pid_file.read_text()))


def test_failed_rank_from_launcher_output_is_reported(tmp_path, fake, capsys):
    log = tmp_path / "workerlog.1"
    assert run(fake + [str(log)], os.environ, PLAN, interval_s=0.1) == 7
    err = capsys.readouterr().err
    assert f"rank 1 (local rank 1 on node 0, 127.0.0.1) failed with exit code 7; last lines of {log}:" in err
    assert "    Traceback: boom" in err
    assert not alive(int((tmp_path / "worker.pid").read_text()))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_runner_ends_every_process(tmp_path, fake, sig):
    driver = textwrap.dedent(f"""
        import os, sys
        from paddledist.cluster import ClusterPlan
        from paddledist.config import DeviceSpec
        from paddledist.launch import run
        plan = ClusterPlan(("127.0.0.1",), 0, "lo", DeviceSpec("cpu", (0,)), 6170, "t", 10, "test")
        sys.exit(run({fake!r}, os.environ, plan, interval_s=0.1))
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    runner = subprocess.Popen([sys.executable, "-c", driver], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    worker = int(wait_for(tmp_path / "worker.pid"))
    time.sleep(0.3)  # let the runner's poll see the worker's session
    runner.send_signal(sig)
    _, err = runner.communicate(timeout=20)
    assert runner.returncode == 128 + sig, err
    assert "ended every process of this launch" in err
    assert not alive(worker)


def test_a_preemption_signal_asks_first_and_ends_the_job_past_the_grace(tmp_path, fake):
    """SIGTERM with a Preemption is a request (passed on by the poll loop), not a stop; ranks that never leave
    are ended after the grace, the job fails naming it, and no worker survives."""
    asked = tmp_path / "asked"
    driver = textwrap.dedent(f"""
        import os, sys
        from paddledist.cluster import ClusterPlan
        from paddledist.config import DeviceSpec
        from paddledist.launch.runner import Preemption, run_to_end
        plan = ClusterPlan(("127.0.0.1",), 0, "lo", DeviceSpec("cpu", (0,)), 6170, "t", 10, "test")
        ask = Preemption(lambda why: open({str(asked)!r}, "w").write(why), grace_s=1.5)
        ended = run_to_end({fake!r}, os.environ, plan, interval_s=0.1, preemption=ask)
        sys.exit(ended.code)
    """)
    runner_proc = subprocess.Popen([sys.executable, "-c", driver], env=dict(os.environ, PYTHONPATH=str(REPO)),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker = int(wait_for(tmp_path / "worker.pid"))
    time.sleep(0.3)
    runner_proc.send_signal(signal.SIGUSR1)
    assert wait_for(asked, timeout=5) == f"signal {int(signal.SIGUSR1)}"
    assert alive(worker)  # asked, not ended
    _, err = runner_proc.communicate(timeout=20)
    assert runner_proc.returncode == 1, err
    assert "did not save and leave within Train.preempt_grace=1.5s of the preemption signal" in err
    assert not alive(worker)


# --- the runner and the other machines' heartbeat links (a stand-in for cluster.liveness.EtcdPeers) --------

class FakePeers:
    def __init__(self, verdict_when=None, blame=None):
        self.verdict_when, self.blame, self.told = verdict_when, blame, []

    def check(self):
        return self.verdict_when() if self.verdict_when else None

    def explain(self, wait_s):
        self.told.append(("explain", wait_s))
        return self.blame

    def tell(self, reason):
        self.told.append(("tell", reason))

    def failed(self, reason):
        self.told.append(("failed", reason))

    def finish(self):
        self.told.append(("done", None))
        return None  # every node finished


def test_a_lost_peer_stops_the_job_and_is_not_blamed_on_this_node(tmp_path, fake, capsys):
    pid_file = tmp_path / "worker.pid"
    peers = FakePeers(verdict_when=lambda: "node 2 (10.0.0.3) lost: x" if pid_file.exists() else None)
    assert run(fake, os.environ, PLAN, interval_s=0.1, peers=peers) == 1
    assert "stopping the job: node 2 (10.0.0.3) lost: x; ended every process of this launch on node 0" in \
        capsys.readouterr().err
    assert peers.told == [("failed", None)]  # the others hear of the loss from node 0, not from here
    assert not alive(int(pid_file.read_text()))


def test_ranks_whose_collectives_broke_wait_for_the_cause_and_name_it_first(tmp_path, fake, capsys):
    log = tmp_path / "workerlog.1"
    peers = FakePeers(blame="node 1 (10.0.0.2) lost: no heartbeat for 31s")
    assert run(fake + [str(log), "terminate called after throwing an instance of 'gloo::IoException'"],
               os.environ, PLAN, interval_s=0.1, peers=peers) == 7
    err = capsys.readouterr().err
    assert err.index("stopping the job: node 1 (10.0.0.2) lost") < err.index("rank 1 (local rank 1 on node 0")
    assert peers.told == [("explain", runner.BLAME_WAIT_S), ("failed", None)]  # the cause is not here


def test_ranks_failing_on_their_own_are_told_to_the_other_machines_at_once(tmp_path, fake, capsys):
    peers = FakePeers()
    assert run(fake + [str(tmp_path / "workerlog.1")], os.environ, PLAN, interval_s=0.1, peers=peers) == 7
    assert peers.told[0] == ("explain", 0)  # only what came before: no waiting
    kind, reason = peers.told[1]
    assert kind == "tell" and reason.startswith("rank 1 failed with exit code 7 (log: ")
    assert reason.endswith("on node 0 (127.0.0.1))")
    assert peers.told[2:] == [("failed", None)]


def test_a_clean_end_is_told_as_done(capsys):
    peers = FakePeers()
    assert run([sys.executable, "-c", "print('ok')"], os.environ, PLAN, interval_s=0.1, peers=peers) == 0
    assert peers.told == [("done", None)]


APPENDING_LAUNCHER = textwrap.dedent("""
    import sys
    log = sys.argv[1]
    with open(log, "a") as f:  # paddle's launcher appends to a workerlog across the launches of a restart
        f.write("step 9\\nTraceback: this launch's own error\\n")
    print(f"Container rank 1 status failed cmd ['python', '-u', 'x.py'] code 3 log {log}", flush=True)
    sys.exit(3)
""")


def test_an_earlier_launchs_lines_in_the_workerlog_are_not_this_failure(tmp_path, capsys):
    """After a restart the workerlog still holds the previous launch's lines (here its broken collective): a rank
    failing on its own now is still told at once, with no wait for a cause elsewhere (chaos, issue 31)."""
    script, logs = tmp_path / "appending_launcher.py", tmp_path / "logs"
    script.write_text(APPENDING_LAUNCHER)
    logs.mkdir()
    log = logs / "workerlog.1"
    log.write_text("terminate called after throwing an instance of 'gloo::IoException'\n")
    peers = FakePeers()
    argv = [sys.executable, str(script), str(log), "--log_dir", str(logs)]
    assert run(argv, os.environ, PLAN, interval_s=0.1, peers=peers) == 3
    assert peers.told[0] == ("explain", 0), peers.told  # not runner.BLAME_WAIT_S: the cause is here
    kind, reason = peers.told[1]
    assert kind == "tell" and reason.startswith("rank 1 failed with exit code 3"), reason
    err = capsys.readouterr().err
    assert "this launch's own error" in err and "gloo::IoException" not in err, err

"""A real Slurm (slurmctld + one slurmd per network-namespace host, tests/helpers/slurm_cluster.py): the harness itself,
then `tools/submit.py --emit slurm`'s script run by sbatch across two nodes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.multihost

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DATA = str(REPO / "dataset" / "digits")


def test_srun_runs_one_task_on_each_namespace_host(slurm_cluster):  # noqa: F811
    cluster = slurm_cluster(2)
    done = cluster.client(["srun", "-N2", "--ntasks-per-node=1", "-l", "hostname"], timeout=60)
    assert done.returncode == 0, f"{done.stderr}\n{cluster.logs()}"
    assert sorted(line.split(":")[0] for line in done.stdout.splitlines()) == ["0", "1"]
    # All namespace hosts share this machine's host name, so show that each task ran in its own host's network
    where = cluster.client(["srun", "-N2", "--ntasks-per-node=1", "-l", "sh", "-c",
                            'echo "$SLURMD_NODENAME $SLURM_NODEID $SLURM_JOB_NODELIST '
                            '$(ip -4 -o addr show dev eth0 | awk \'{print $4}\')"'], timeout=60)
    assert where.returncode == 0, where.stderr
    seen = sorted(line.split(": ", 1)[1] for line in where.stdout.splitlines())
    assert seen == [f"{node} {i} node[01-02] {cluster.hosts.addresses[i]}/24"
                    for i, node in enumerate(cluster.nodes)]
    cluster.close()  # what the fixture does after every test: no daemon, no namespace is left
    assert all(proc.poll() is not None for proc in cluster.daemons())
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in cluster.hosts.namespaces)


def final_digest(rank_log: Path) -> str:
    found = re.findall(r"final parameter digest: ([0-9a-f]{64})", rank_log.read_text())
    assert len(found) == 1, f"{rank_log}: expected one digest line"
    return found[0]


def test_emitted_sbatch_script_trains_on_two_nodes(slurm_cluster, tmp_path):  # noqa: F811
    """`--emit slurm`'s script, submitted with sbatch: srun starts tools/train.py on node01 and node02, which find
    each other from SLURM_JOB_NODELIST (node names resolved through each host's hosts file). Needs the runtime's
    Slurm wiring (branch sched)."""
    out = tmp_path / "out"
    script = tmp_path / "job.sbatch"
    made = subprocess.run([sys.executable, str(REPO / "tools" / "submit.py"), "-c", CONFIG, "--emit", "slurm",
                           "--nodes", "2", "--out", str(script), "-o", f"Global.dataset_dir={DATA}",
                           "Train.epochs_iters=1", f"Global.output={out}", "Train.peer_timeout=60"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    cluster = slurm_cluster(2)
    try:
        done = cluster.client(["sbatch", "--wait", f"--output={tmp_path}/slurm-%j.out", str(script)],
                              timeout=400, cwd=str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not end in 400 s\n{cluster.logs()}")
    output = "\n".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert done.returncode == 0, f"{done.stderr}\n{output[-5000:]}\n{cluster.logs()}"
    for i, node in enumerate(cluster.nodes):
        assert f"this node = node {i} of 2 ({cluster.hosts.addresses[i]}" in output, output[-4000:]
    assert "not authenticated" not in output, "the script's job secret should authenticate the machines"
    result = json.loads((out / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (2, True)
    logs = sorted(out.glob("**/train.rank*.log"))
    assert len(logs) == 2 and len({final_digest(p) for p in logs}) == 1


def test_warning_signal_requeues_and_the_rerun_resumes(slurm_cluster, tmp_path):  # noqa: F811
    """The script's preemption path on one node: USR1 to the batch shell (what `--signal=B:USR1@120` sends
    before the time limit) is passed to the srun step (every rank saves latest at one step, exit 75), then the
    job is requeued; the requeued run continues from rank 0's latest checkpoint (train_result.json's
    start_epoch) instead of starting over."""
    out = tmp_path / "out"
    script = tmp_path / "job.sbatch"
    made = subprocess.run([sys.executable, str(REPO / "tools" / "submit.py"), "-c", CONFIG, "--emit", "slurm",
                           "--nodes", "1", "--out", str(script), "-o", f"Global.dataset_dir={DATA}",
                           "Train.epochs_iters=4", "Train.batch_size=128", "Train.save_interval=1",
                           "Train.uniform_output_enabled=false", "Global.device=cpu:0,1",
                           f"Global.output={out}"], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    cluster = slurm_cluster(1)
    submitted = cluster.client(["sbatch", "--parsable", f"--output={tmp_path}/slurm.out", str(script)],
                               cwd=str(tmp_path))
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    latest = out / "latest" / "latest.pdparams"
    deadline = time.monotonic() + 180
    while not latest.exists():
        assert time.monotonic() < deadline, f"no checkpoint in 180 s\n{cluster.logs()}"
        time.sleep(0.2)
    signalled = cluster.client(["scancel", "--batch", "--signal=USR1", job])
    assert signalled.returncode == 0, signalled.stderr
    deadline = time.monotonic() + 400
    while not (out / "train_result.json").exists() or cluster_has(cluster, job):
        assert time.monotonic() < deadline, (tmp_path / "slurm.out").read_text()[-3000:] + cluster.logs()
        time.sleep(1)
    log = (tmp_path / "slurm.out").read_text()
    assert f"paddledist: job {job} ends in 120 s: saving latest, then requeueing it" in log
    assert "every rank saves latest at the next step" in log  # the step got USR1: a preemption, not a kill
    result = json.loads((out / "train_result.json").read_text())
    assert result["done_flag"] and result["start_epoch"] > 1, result


def cluster_has(cluster, job: str) -> bool:
    """Whether the job is still pending or running (squeue lists it)."""
    done = cluster.client(["squeue", "-h", "-j", job, "-o", "%T"])
    return done.returncode == 0 and done.stdout.strip() != ""

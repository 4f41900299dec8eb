"""Self-healing and preemption on real two-host jobs (network-namespace hosts, tests/helpers/netns.py).

With Train.max_restarts=1, a host whose workers are killed (its supervisor lives) makes every supervisor end its
workers, meet again in the job's etcd and relaunch from latest: both hosts exit 0, train_result.json records the
restart and the parameters equal an uninterrupted run's; a second kill is past the limit and fails as without
restarts, naming the cause. SIGTERM to one host's supervisor mid-epoch makes every rank save latest at the same
step and both hosts exit 75 (errors.PREEMPTED_EXIT); the same command (Train.resume_path=auto) then finishes
with the parameters of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.netns import NetnsHosts, netns_hosts  # noqa: F401  (fixture)
from helpers.failures import CONFIG, DATA, TRAIN, heartbeat_overrides, output, pids_in, start, \
    wait_all, wait_for_epoch

from paddledist.errors import PREEMPTED_EXIT
from helpers.heal import EPOCHS, kill_workers, result, wait_for_text  # noqa: F401

pytestmark = pytest.mark.multihost


def command(hosts: NetnsHosts, *extra: str) -> list[str]:
    import sys

    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_ips={','.join(hosts.addresses)}",
            "Global.output=out", f"Global.dataset_dir={DATA}", f"Train.epochs_iters={EPOCHS}",
            "Train.save_interval=100", "Train.peer_timeout=60", "Train.uniform_output_enabled=False",
            "Train.resume_path=auto", *heartbeat_overrides(), *extra]


def test_a_killed_worker_is_restarted_and_the_job_finishes(netns_hosts, tmp_path):  # noqa: F811
    """...and, restarted from the last epoch's checkpoint, ends with the parameters of an uninterrupted run."""
    hosts = netns_hosts(2)
    reference = start(hosts, tmp_path, "reference", command(hosts, "Train.augment=False", "Global.output=ref"))
    assert all(code == 0 for code, _ in wait_all(reference, timeout=240).values()), output(tmp_path, "reference", 0)
    procs = start(hosts, tmp_path, "heal", command(hosts, "Train.max_restarts=1", "Train.augment=False"))
    wait_for_epoch(tmp_path, 1, procs)
    kill_workers(hosts, 1)
    killed = time.monotonic()
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", "resumed from epoch", procs)
    print(f"training again {time.monotonic() - killed:.1f}s after the kill")
    done = wait_all(procs, timeout=240)
    for i, (code, _) in done.items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'heal', i)[-4000:]}"
        assert "restart 1/1 after: " in output(tmp_path, "heal", i)
    first = output(tmp_path, "heal", 0)
    assert "Train.resume_path=auto: no out/latest/latest.pdparams yet; starting from the beginning" in first
    assert "Train.resume_path=auto: resuming from out/latest/latest.pdparams" in first
    got = result(tmp_path)
    assert got["done_flag"] is True and [h["epoch"] for h in got["history"]] == list(range(1, EPOCHS + 1))
    assert len(got["restarts"]) == 1, got["restarts"]
    assert "rank 1 failed with exit code -9" in got["restarts"][0]["cause"]
    assert got["restarts"][0]["epoch"] >= 1 and got["start_epoch"] == got["restarts"][0]["epoch"] + 1
    assert not pids_in(hosts, 0) and not pids_in(hosts, 1)
    # The run's report shows both machines' throughput and the restart with its cause.
    machines = got["history"][-1]["machines"]
    assert [m["host"] for m in machines] == list(hosts.addresses[:2]) and all(m["images_per_sec"] > 0 for m in machines)
    page = (tmp_path / "host0" / "out" / "report.html").read_text()
    assert got["report"] == "report.html" and "rank 1 failed with exit code -9" in page
    assert all(f"<td>{m['host']}</td><td>eth0</td>" in page and f"<td>{m['images_per_sec']}</td>" in page
               for m in machines), page[:3000]
    healed, uninterrupted = params(tmp_path, "out"), params(tmp_path, "ref")
    assert max(float(np.abs(healed[k] - uninterrupted[k]).max()) for k in uninterrupted) <= 1e-6


def test_a_lost_host_started_again_by_hand_rejoins_and_the_job_finishes(netns_hosts, tmp_path):  # noqa: F811
    """Everything on host 1 is killed (supervisor too): host 0 restarts and waits in the preflight; the same
    command started again on host 1 joins it, and the job finishes from latest."""
    hosts = netns_hosts(2)
    argv = command(hosts, "Train.max_restarts=1")
    procs = start(hosts, tmp_path, "lost", argv)
    wait_for_epoch(tmp_path, 1, procs)
    for pid in pids_in(hosts, 1):
        os.kill(int(pid), signal.SIGKILL)
    procs[1].wait(timeout=10)
    wait_for_text(tmp_path / "lost.host0.txt", "restart 1/1 after: node 1 (", {0: procs[0]})
    log = open(tmp_path / "lost-again.host1.txt", "w")
    again = hosts.popen(1, argv, cwd=str(tmp_path / "host1"), stdout=log, stderr=subprocess.STDOUT)
    done = wait_all({0: procs[0], 1: again}, timeout=240)
    assert [code for code, _ in done.values()] == [0, 0], output(tmp_path, "lost", 0)[-3000:]
    got = result(tmp_path)
    assert got["done_flag"] is True and len(got["restarts"]) == 1 and " lost: " in got["restarts"][0]["cause"]


def test_a_failure_past_max_restarts_fails_naming_the_cause(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    procs = start(hosts, tmp_path, "limit", command(hosts, "Train.max_restarts=1"))
    wait_for_epoch(tmp_path, 1, procs)
    first = kill_workers(hosts, 1)
    wait_for_text(tmp_path / "limit.host1.txt", "restart 1/1 after: ", procs)
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", "resumed from epoch", procs)
    kill_workers(hosts, 1, spare=first)
    done = wait_all(procs, timeout=120)
    cause = f"node 1 ({hosts.addresses[1]}) stopped: rank 1 failed with exit code -9"
    for i, (code, _) in done.items():
        assert code != 0, f"host {i} exited 0"
    text = output(tmp_path, "limit", 0)
    assert f"giving up after 1 restart(s) (Train.max_restarts=1): {cause}" in text, text[-3000:]
    assert "rank 1 (local rank 0 on node 1" in output(tmp_path, "limit", 1)
    assert result(tmp_path)["done_flag"] is False
    assert not pids_in(hosts, 0) and not pids_in(hosts, 1)


def params(tmp_path: Path, folder: str) -> dict:
    import paddle

    return paddle.load(str(tmp_path / "host0" / folder / "latest" / "latest.pdparams"), return_numpy=True)


def test_sigterm_saves_the_step_everywhere_and_a_rerun_without_the_first_output_is_uninterrupted(
        netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    fast = ("Train.batch_size=8", "Train.log_interval=1", "Train.augment=False")  # 90 steps an epoch, each logged
    reference = start(hosts, tmp_path, "reference", command(hosts, *fast, "Global.output=ref"))
    assert all(code == 0 for code, _ in wait_all(reference, timeout=240).values()), output(tmp_path, "reference", 0)

    procs = start(hosts, tmp_path, "first", command(hosts, *fast))
    log = tmp_path / "host0" / "out" / "logs" / "train.rank0.log"
    wait_for_text(log, f"epoch 2/{EPOCHS} iter 20/", procs)
    supervisor = procs[1].pid  # `ip netns exec` runs the command in its own process
    assert "train.py" in Path(f"/proc/{supervisor}/cmdline").read_text()
    os.kill(supervisor, signal.SIGTERM)
    done = wait_all(procs, timeout=60)
    for i, (code, seconds) in done.items():
        assert code == PREEMPTED_EXIT and seconds < 60, f"host {i} ({code}, {seconds:.0f}s):\n" + \
            output(tmp_path, "first", i)[-3000:]
    print(f"both hosts exited {PREEMPTED_EXIT} within {max(s for _, s in done.values()):.1f}s of SIGTERM")
    assert "preemption asked by node 1" in output(tmp_path, "first", 0)
    epoch, step = map(int, re.search(r"preempted: saved latest at epoch (\d+) step (\d+)/", log.read_text()).groups())
    info = json.loads((tmp_path / "host0" / "out" / "latest" / "latest.info.json").read_text())
    assert (info["epoch"], info["step_in_epoch"]) == (epoch - 1, step) and step > 0, info
    assert result(tmp_path)["done_flag"] is False
    # the second machine keeps its own latest of the same step (engine/latest.py); results stay rank 0's
    own = tmp_path / "host1" / "out"
    assert json.loads((own / "latest" / "latest.info.json").read_text()) == info
    assert not (own / "train_result.json").exists() and not (own / "best_model").exists()

    shutil.rmtree(tmp_path / "host0" / "out")  # the first machine's disk is lost: the second has the step
    procs = start(hosts, tmp_path, "again", command(hosts, *fast))
    for i, (code, _) in wait_all(procs, timeout=240).items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'again', i)[-4000:]}"
    text = log.read_text()
    assert f"rank 1's latest (epoch {epoch - 1}, step {step} of the next) is the newest any machine holds " \
           "(this machine's: none); resuming from it" in text
    assert f"continuing at epoch {epoch} step {step + 1}" in text
    assert result(tmp_path)["done_flag"] is True
    resumed, uninterrupted = params(tmp_path, "out"), params(tmp_path, "ref")
    assert max(float(np.abs(resumed[k] - uninterrupted[k]).max()) for k in uninterrupted) <= 1e-6


def test_machines_sharing_one_output_folder_leave_latest_to_rank_0(netns_hosts, tmp_path):  # noqa: F811
    """Namespace hosts share this machine's file system, as machines share an NFS folder: with one absolute
    Global.output, the second machine sees rank 0's token there and does not write a latest of its own."""
    hosts = netns_hosts(2)
    shared = tmp_path / "shared"
    procs = start(hosts, tmp_path, "shared", command(hosts, "Train.batch_size=32", f"Global.output={shared}"))
    for i, (code, _) in wait_all(procs, timeout=240).items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'shared', i)[-4000:]}"
    worker = (shared / "logs" / hosts.addresses[1] / "workerlog.0").read_text()
    assert f"rank 1: Global.output {shared} is rank 0's own folder (a shared file system)" in worker
    assert json.loads((shared / "train_result.json").read_text())["done_flag"] is True
    assert json.loads((shared / "latest" / "latest.info.json").read_text())["epoch"] == EPOCHS


def test_a_link_cut_that_heals_within_the_heartbeat_timeout_costs_no_restart(netns_hosts, tmp_path):  # noqa: F811
    """10 s without a link (not a kill): gloo's collectives and the heartbeat connection wait it out over TCP,
    below Train.heartbeat_timeout=30 nothing is declared lost, and the job finishes without a restart."""
    hosts = netns_hosts(2)
    procs = start(hosts, tmp_path, "cut", command(hosts, "Train.batch_size=8", "Train.log_interval=1",
                                                  "Train.heartbeat_timeout=30", "Train.max_restarts=1"))
    log = tmp_path / "host0" / "out" / "logs" / "train.rank0.log"
    wait_for_text(log, f"epoch 2/{EPOCHS} iter 10/", procs)
    veth = f"{hosts.tag}h1"  # host 1's link, from the host side of its veth pair
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    steps_at_cut = log.read_text().count(" iter ")
    time.sleep(10)
    stalled = log.read_text().count(" iter ") - steps_at_cut
    subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    assert all(p.poll() is None for p in procs.values()) and stalled <= 2, stalled  # training waited, nothing ended
    for i, (code, _) in wait_all(procs, timeout=240).items():
        text = output(tmp_path, "cut", i)
        assert code == 0 and "paddledist: restart" not in text and " lost:" not in text, f"host {i}:\n{text[-4000:]}"
    got = result(tmp_path)
    assert got["done_flag"] is True and got["restarts"] == []

"""Train.nnodes as a range on real namespace hosts (tests/helpers/netns.py): three hosts meet in master-address mode
with Train.nnodes=2:3; everything on host 2 is killed mid-run (its supervisor's process group and its workers), and
with Train.max_restarts=1 hosts 0 and 1 meet again, continue with 2 machines from latest (a new world size, the
same global batch by accumulation) and finish: both exit 0, done_flag true, one restart recorded with its node count.
A job preempted mid-epoch on three hosts and requeued on two starts that epoch again from epoch_<N>.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from helpers.netns import NetnsHosts, netns_hosts  # noqa: F401  (fixture)
from helpers.failures import CONFIG, DATA, TRAIN, heartbeat_overrides, output, pids_in, start, wait_all, \
    wait_for_epoch
from helpers.heal import EPOCHS, result, wait_for_text

from paddledist.errors import PREEMPTED_EXIT
from helpers.elastic import kill_host, largest_difference, list_command, params, uninterrupted  # noqa: F401

pytestmark = pytest.mark.multihost

PEER_TIMEOUT = 40
"""Long enough for three hosts sharing two cores to start together; node 0 waits this long for the lost one."""


def command(hosts: NetnsHosts, *extra: str) -> list[str]:
    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_master={hosts.addresses[0]}:36543",
            "Train.nnodes=2:3", "Global.output=out", f"Global.dataset_dir={DATA}", f"Train.epochs_iters={EPOCHS}",
            "Train.save_interval=100", f"Train.peer_timeout={PEER_TIMEOUT}", "Train.uniform_output_enabled=False",
            "Train.resume_path=auto", *heartbeat_overrides(), *extra]


def test_a_lost_host_leaves_two_of_three_that_continue(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    procs = start(hosts, tmp_path, "elastic", command(hosts, "Train.max_restarts=1"))
    wait_for_epoch(tmp_path, 1, procs, timeout=240)
    kill_host(hosts, procs, 2)
    survivors = {i: procs[i] for i in (0, 1)}
    wait_for_text(tmp_path / "elastic.host0.txt", "continuing with 2 of 3 machines", survivors,
                  timeout=PEER_TIMEOUT + 60)
    done = wait_all(survivors, timeout=300)
    for i, (code, _) in done.items():
        text = output(tmp_path, "elastic", i)
        assert code == 0, f"host {i}:\n{text[-4000:]}"
        assert "restart 1/1 after: " in text and "once at least 2 of the 3 nodes meet again" in text
    first = output(tmp_path, "elastic", 0)
    assert "this node = node 0 of 3" in first
    # paddle's launcher got --nnodes 3, then the agreed 2 ("replicas N[N:N]" is its own log of --nnodes)
    assert first.index("replicas 3[3:3]") < first.index("continuing with 2 of 3 machines") < \
        first.index("replicas 2[2:2]")
    log = (tmp_path / "host0" / "out" / "logs" / "train.rank0.log").read_text()
    # the global batch of 3 x 64 is kept (engine/batchplan.py): 2 ranks x 2 micro-batches of 48, the same updates
    assert "keeping the global batch of 192 samples (the resumed checkpoint's) on 2 rank(s): per-rank batch 48, " \
           "accumulation 2" in log
    assert "updates per epoch now" not in log
    assert f"this node = node 1 of 2 ({hosts.addresses[1]}" in output(tmp_path, "elastic", 1)
    got = result(tmp_path)
    assert got["done_flag"] is True and [h["epoch"] for h in got["history"]] == list(range(1, EPOCHS + 1))
    assert got["world_size"] == 2, got["world_size"]
    assert len(got["restarts"]) == 1 and got["restarts"][0]["nodes"] == 2, got["restarts"]
    assert {k: got["restarts"][0][k] for k in ("world_size", "batch_size", "accum_steps")} == \
        {"world_size": 2, "batch_size": 48, "accum_steps": 2}, got["restarts"]
    assert got["global_batch_size"] == 192
    assert f"node 2 ({hosts.addresses[2]})" in got["restarts"][0]["cause"], got["restarts"]
    assert got["restarts"][0]["epoch"] >= 1 and got["start_epoch"] == got["restarts"][0]["epoch"] + 1
    assert not pids_in(hosts, 0) and not pids_in(hosts, 1) and not pids_in(hosts, 2)


def test_a_requeued_job_on_fewer_machines_starts_the_preempted_epoch_again(netns_hosts, tmp_path):  # noqa: F811
    """SIGTERM mid-epoch saves latest at one step on all three hosts (exit 75); the same command on two of them
    continues with 2 machines at that step: the global batch of 3 x 8 is kept as 2 ranks x 2 micro-batches of 6
    (engine/batchplan.py), so the checkpoint's updates are this run's too, and the job finishes."""
    hosts = netns_hosts(3)
    fast = ("Train.batch_size=8", "Train.log_interval=1", "Train.save_interval=1")
    procs = start(hosts, tmp_path, "first", command(hosts, *fast))
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", f"epoch 2/{EPOCHS} iter 10/", procs)
    os.kill(procs[1].pid, signal.SIGTERM)
    done = wait_all(procs, timeout=90)
    assert all(code == PREEMPTED_EXIT for code, _ in done.values()), {i: output(tmp_path, "first", i)[-2000:]
                                                                       for i in done}
    again = {}
    for i in (0, 1):
        log = open(tmp_path / f"again.host{i}.txt", "w")
        again[i] = hosts.popen(i, command(hosts, *fast), cwd=str(tmp_path / f"host{i}"), stdout=log,
                               stderr=subprocess.STDOUT)
    for i, (code, _) in wait_all(again, timeout=300).items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'again', i)[-4000:]}"
    text = output(tmp_path, "again", 0)
    assert "continuing with 2 of 3 machines" in text
    assert "starting epoch 2 again" not in text, text[-4000:]
    log = (tmp_path / "host0" / "out" / "logs" / "train.rank0.log").read_text()
    assert ("keeping the global batch of 24 samples (the resumed checkpoint's) on 2 rank(s): per-rank batch 6, "
            "accumulation 2") in log
    step = int(re.search(r"resumed from epoch 1; continuing at epoch 2 step (\d+)", log).group(1))
    assert step > 20 and step % 2 == 1  # after at least 10 updates of 3 ranks, counted in micro-batches of 2
    got = result(tmp_path)
    assert got["done_flag"] is True and got["world_size"] == 2 and got["start_epoch"] == 2
    assert [h["epoch"] for h in got["history"]] == list(range(1, EPOCHS + 1))


def test_the_first_host_lost_for_good_the_others_finish_with_the_same_math(netns_hosts, uninterrupted, tmp_path):  # noqa: F811
    """Three hosts; the first is killed with everything on it and its Global.output deleted. The command run again
    on the other two, listing them, resumes from their own latest (engine/latest.py) at the same global batch
    (3 x 8 as 2 ranks x 2 micro-batches of 6, engine/batchplan.py), and its final parameters equal an
    uninterrupted 3-host run's (the same updates, summed in another order: a learning rate at which LeNet trains
    smoothly, so rounding is not amplified; at 0.05 this batch makes the loss jump and 1e-7 differences grow)."""
    hosts = netns_hosts(3)
    want = uninterrupted(hosts, tmp_path)
    procs = start(hosts, tmp_path, "first", list_command(hosts.addresses))
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", f"epoch 2/{EPOCHS} iter 10/", procs)
    kill_host(hosts, procs, 0)
    shutil.rmtree(tmp_path / "host0" / "out")
    for i, (code, _) in wait_all({i: procs[i] for i in (1, 2)}, timeout=120).items():
        assert code != 0 and "node 0" in output(tmp_path, "first", i), output(tmp_path, "first", i)[-3000:]
    survivors = hosts.addresses[1:]
    again = {}
    for i in (1, 2):
        log = open(tmp_path / f"again.host{i}.txt", "w")
        again[i] = hosts.popen(i, list_command(survivors), cwd=str(tmp_path / f"host{i}"), stdout=log,
                               stderr=subprocess.STDOUT)
    for i, (code, _) in wait_all(again, timeout=300).items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'again', i)[-4000:]}"
    log = (tmp_path / "host1" / "out" / "logs" / "train.rank0.log").read_text()
    assert "keeping the global batch of 24 samples (the resumed checkpoint's) on 2 rank(s): per-rank batch 6" in log
    assert "resumed from epoch 1; continuing at epoch 2" in log
    assert largest_difference(want, params(tmp_path / "host1" / "out")) <= 1e-5

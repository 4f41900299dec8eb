"""A Train.dist_ips pool on real namespace hosts (tests/helpers/netns.py): Train.nnodes=2:3 with a list of three and
Train.max_restarts, LeNet without augmentation. A host killed for good mid-run (every process there, its
Global.output deleted) leaves two that re-form in the job's etcd within the same command (cluster/etcdjob.py):
the first live machine of the list is the new rank 0, they continue from the newest latest the two kept
(engine/latest.py) at the same global batch (engine/batchplan.py), and their final parameters equal those of an
uninterrupted three-host run. A lost host whose command is run again registers for the next generation and is
taken in at the next restart (a second fault forces one): the job ends on three, the same parameters."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.netns import netns_hosts  # noqa: F401  (fixture)
from helpers.elastic import kill_host, largest_difference, list_command, params, uninterrupted  # noqa: F401
from helpers.failures import output, pids_in, start, wait_all
from helpers.heal import EPOCHS, kill_workers, wait_for_text

pytestmark = pytest.mark.multihost

POOL = ("Train.nnodes=2:3", "Train.max_restarts=1")


def test_the_first_host_lost_for_good_the_other_two_re_form_and_finish_with_the_same_math(netns_hosts, uninterrupted, tmp_path):  # noqa: F811,E501
    hosts = netns_hosts(3)
    want = uninterrupted(hosts, tmp_path)
    argv = list_command(hosts.addresses, *POOL, "Global.mode=train,export")
    argv[1] = str(Path(argv[1]).with_name("main.py"))  # Global.mode: export follows training, on the first machine
    procs = start(hosts, tmp_path, "pool", argv)
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", f"epoch 2/{EPOCHS} iter 10/", procs,
                  timeout=300)
    kill_host(hosts, procs, 0)
    shutil.rmtree(tmp_path / "host0" / "out")
    done = wait_all({i: procs[i] for i in (1, 2)}, timeout=400)
    a, b, c = hosts.addresses
    for i, (code, _) in done.items():
        text = output(tmp_path, "pool", i)
        assert code == 0, f"host {i}:\n{text[-4000:]}"
        assert f"re-forming without {a}" in text, text[-4000:]
        assert f"the pool meets on 2 machine(s) {b},{c}: this node is node {i - 1}" in text, text[-4000:]
        assert f"restart 1/1 after: node 0 ({a}) lost" in text and "once at least 2 of the 3 nodes meet again in " \
            "the job's etcd" in text, text[-4000:]
    log = (tmp_path / "host1" / "out" / "logs" / "train.rank0.log").read_text()
    assert "keeping the global batch of 24 samples (the resumed checkpoint's) on 2 rank(s): per-rank batch 6" in log
    assert "resumed from epoch 1; continuing at epoch 2" in log
    got = json.loads((tmp_path / "host1" / "out" / "train_result.json").read_text())
    assert got["done_flag"] is True and got["world_size"] == 2, got
    assert len(got["restarts"]) == 1 and got["restarts"][0]["nodes"] == 2, got["restarts"]
    assert f"node 0 ({a}) lost" in got["restarts"][0]["cause"], got["restarts"]
    for i in (1, 2):  # every machine keeps its own latest: both end with the uninterrupted run's parameters
        difference = largest_difference(want, params(tmp_path / f"host{i}" / "out"))
        print(f"host {i}: largest parameter difference to the uninterrupted run {difference:.2e}")
        assert difference <= 1e-5, difference
    assert not pids_in(hosts, 1) and not pids_in(hosts, 2)
    # the re-formed pool's rank 0 (host 1) exports its best model; host 2 is not the first machine any more
    assert (tmp_path / "host1" / "out" / "inference" / "inference.yml").is_file(), output(tmp_path, "pool", 1)
    assert "export runs on the first machine of Train.dist_ips only; skipped here" in output(tmp_path, "pool", 2)
    assert not (tmp_path / "host2" / "out" / "inference").exists()


LONGER = "Train.epochs_iters=8"
"""Room for a loss, a re-formed launch, the lost host's return and a second fault before the end."""


def test_the_last_host_lost_then_run_again_rejoins_at_the_next_restart_and_the_job_ends_on_three(netns_hosts, uninterrupted, tmp_path):  # noqa: F811,E501
    hosts = netns_hosts(3)
    want = uninterrupted(hosts, tmp_path, LONGER)
    argv = list_command(hosts.addresses, "Train.nnodes=2:3", "Train.max_restarts=2", LONGER)
    procs = start(hosts, tmp_path, "pool", argv)
    rank0 = tmp_path / "host0" / "out" / "logs" / "train.rank0.log"
    wait_for_text(rank0, "epoch 2/8 iter 10/", procs, timeout=300)
    kill_host(hosts, procs, 2)
    shutil.rmtree(tmp_path / "host2" / "out")
    survivors = {i: procs[i] for i in (0, 1)}
    wait_for_text(rank0, "on 2 rank(s): per-rank batch 6", survivors, timeout=200)  # re-formed and relaunched
    wait_for_text(rank0, "epoch 3/8 iter 10/", survivors, timeout=200)  # the two saved epoch 2 on their own
    back = open(tmp_path / "back.host2.txt", "w")
    procs[2] = hosts.popen(2, argv, cwd=str(tmp_path / "host2"), stdout=back, stderr=subprocess.STDOUT)
    wait_for_text(tmp_path / "back.host2.txt", "this machine waits to be taken in at its next restart", procs,
                  timeout=60)
    kill_workers(hosts, 1)  # a second fault forces the next restart
    done = wait_all(procs, timeout=400)
    a, b, c = hosts.addresses
    for i, (code, _) in done.items():
        text = output(tmp_path, "back" if i == 2 else "pool", i)
        assert code == 0, f"host {i}:\n{text[-4000:]}"
    for i in (0, 1):
        text = output(tmp_path, "pool", i)
        assert f"re-forming without {c}" in text, text[-4000:]
        assert f"the pool meets on 2 machine(s) {a},{b}: this node is node {i}" in text, text[-4000:]
        assert f"the pool meets on 3 machine(s) {a},{b},{c}: this node is node {i}" in text, text[-4000:]
    assert f"on {a},{b}; this machine waits to be taken in" in output(tmp_path, "back", 2)
    got = json.loads((tmp_path / "host0" / "out" / "train_result.json").read_text())
    assert got["done_flag"] is True and got["world_size"] == 3, got
    assert [r["nodes"] for r in got["restarts"]] == [2, 3], got["restarts"]
    assert f"node 2 ({c}) lost" in got["restarts"][0]["cause"] and f"node 1 ({b}) stopped" in \
        got["restarts"][1]["cause"], got["restarts"]
    assert got["restarts"][1]["epoch"] >= 2, got["restarts"]  # the three went on from what the two had done
    for i in (0, 1, 2):
        difference = largest_difference(want, params(tmp_path / f"host{i}" / "out"))
        print(f"host {i}: largest parameter difference to the uninterrupted run {difference:.2e}")
        assert difference <= 1e-5, difference


def test_the_first_host_run_again_rejoins_as_rank_0_and_the_job_ends_on_three(netns_hosts, uninterrupted, tmp_path):  # noqa: F811,E501
    """The head of the list is lost for good, then its command is run again: it registers for the next
    generation, is taken in at the next restart (a second fault) and, first of the list again, is rank 0; its
    results carry the job's restarts, read from the others' hellos."""
    hosts = netns_hosts(3)
    want = uninterrupted(hosts, tmp_path, LONGER)
    argv = list_command(hosts.addresses, "Train.nnodes=2:3", "Train.max_restarts=2", LONGER)
    procs = start(hosts, tmp_path, "pool", argv)
    wait_for_text(tmp_path / "host0" / "out" / "logs" / "train.rank0.log", "epoch 2/8 iter 10/", procs, timeout=300)
    kill_host(hosts, procs, 0)
    shutil.rmtree(tmp_path / "host0" / "out")
    survivors = {i: procs[i] for i in (1, 2)}
    rank0 = tmp_path / "host1" / "out" / "logs" / "train.rank0.log"  # host 1 is rank 0 of the re-formed pool
    wait_for_text(rank0, "on 2 rank(s): per-rank batch 6", survivors, timeout=200)
    wait_for_text(rank0, "epoch 3/8 iter 10/", survivors, timeout=200)
    back = open(tmp_path / "back.host0.txt", "w")
    procs[0] = hosts.popen(0, argv, cwd=str(tmp_path / "host0"), stdout=back, stderr=subprocess.STDOUT)
    wait_for_text(tmp_path / "back.host0.txt", "this machine waits to be taken in at its next restart", procs,
                  timeout=60)
    kill_workers(hosts, 2)  # a second fault forces the next restart
    done = wait_all(procs, timeout=400)
    a, b, c = hosts.addresses
    for i, (code, _) in done.items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'back' if i == 0 else 'pool', i)[-4000:]}"
    assert f"on {b},{c}; this machine waits to be taken in" in output(tmp_path, "back", 0)
    for i in (1, 2):
        assert f"the pool meets on 3 machine(s) {a},{b},{c}: this node is node {i}" in output(tmp_path, "pool", i)
    assert f"the pool meets on 3 machine(s) {a},{b},{c}: this node is node 0" in output(tmp_path, "back", 0)
    got = json.loads((tmp_path / "host0" / "out" / "train_result.json").read_text())
    assert got["done_flag"] is True and got["world_size"] == 3, got
    assert [r["nodes"] for r in got["restarts"]] == [2, 3], got["restarts"]
    assert got["restarts"][1]["epoch"] >= 2, got["restarts"]
    for i in (0, 1, 2):
        difference = largest_difference(want, params(tmp_path / f"host{i}" / "out"))
        print(f"host {i}: largest parameter difference to the uninterrupted run {difference:.2e}")
        assert difference <= 1e-5, difference

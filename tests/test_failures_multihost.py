"""Failures on real multi-host jobs (network-namespace hosts, tests/helpers/netns.py): a host whose processes are killed
mid-training, or whose network link goes down, stops every other host within the promised time (60 s, 180 s),
naming it; no process is left on any host; then the same command with Train.resume_path continues from the
next epoch on every host and finishes. A killed worker alone is named by its rank; a host with another config
stops every host before launch. Skips where namespaces cannot be made (not root, no `ip netns`).

Every host runs the identical command in its own folder (relative Global.output), as machines with their own
disks would: the checkpoint to resume from exists on the first host only.

The link test uses short heartbeats (Train.heartbeat_interval=1, heartbeat_timeout=10) to stay fast; set
PADDLEDIST_TEST_HEARTBEAT=default to run it at the documented defaults (measured: about 32 s on CPU, where
gloo's own 30 s collective timeout fires first and the silent host is named; 180 s is the promise).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from helpers.netns import NetnsHosts, netns_hosts  # noqa: F401  (fixture)

import pytest
from helpers.failures import (EPOCHS, command, heartbeat_overrides,
                              is_worker, output, pids_in, start, wait_all, wait_for_epoch)  # noqa: F401

pytestmark = pytest.mark.multihost

RESUME = "out/latest/latest.pdparams"


def resume_and_finish(hosts: NetnsHosts, tmp_path: Path, stopped_after: int) -> None:
    """The same command plus Train.resume_path on every host: it continues at the next epoch and finishes. The
    other hosts' own latest (engine/latest.py) is removed first: an explicit path on the first host is enough."""
    for i in range(1, hosts.count):
        shutil.rmtree(tmp_path / f"host{i}" / "out", ignore_errors=True)
    procs = start(hosts, tmp_path, "resume", command(hosts, f"Train.resume_path={RESUME}", *heartbeat_overrides()))
    done = wait_all(procs, timeout=240)
    for i, (code, _) in done.items():
        assert code == 0, f"host {i}:\n{output(tmp_path, 'resume', i)[-4000:]}"
    info = json.loads((tmp_path / "host1" / "out" / "latest" / "latest.info.json").read_text())
    assert info["epoch"] == EPOCHS  # written again by the second host itself, at every epoch
    result = json.loads((tmp_path / "host0" / "out" / "train_result.json").read_text())
    assert result["done_flag"] is True and result["world_size"] == hosts.count
    assert result["start_epoch"] > 1 and result["start_epoch"] >= stopped_after + 1, result["start_epoch"]
    assert [h["epoch"] for h in result["history"]] == list(range(1, EPOCHS + 1))
    assert f"resumed from epoch {result['start_epoch'] - 1}" in (tmp_path / "host0" / "out" / "logs" /
                                                                  "train.rank0.log").read_text()


def test_killed_host_is_named_everywhere_then_the_job_resumes(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    procs = start(hosts, tmp_path, "first", command(hosts, *heartbeat_overrides()))
    wait_for_epoch(tmp_path, 2, procs)
    for pid in pids_in(hosts, 2):  # everything on host 2: supervisor, launcher, workers
        os.kill(int(pid), signal.SIGKILL)
    done = wait_all({i: procs[i] for i in (0, 1)}, timeout=60)
    lost = f"node 2 ({hosts.addresses[2]}) lost"
    for i, (code, seconds) in done.items():
        text = output(tmp_path, "first", i)
        assert code != 0 and seconds < 60, (code, seconds)
        assert lost in text, text[-3000:]
        assert not pids_in(hosts, i), f"processes left on host {i}"
    print(f"killed host detected in {max(s for _, s in done.values()):.1f}s")
    resume_and_finish(hosts, tmp_path, stopped_after=2)


def test_a_killed_worker_is_named_by_rank_on_every_host(netns_hosts, tmp_path):  # noqa: F811
    """Only the worker dies (as under the OOM killer); its supervisor lives and says which rank failed, while
    the other hosts' ranks fail only because their collectives broke."""
    hosts = netns_hosts(2)
    procs = start(hosts, tmp_path, "worker", command(hosts, *heartbeat_overrides()))
    wait_for_epoch(tmp_path, 1, procs)
    workers = [pid for pid in pids_in(hosts, 1) if is_worker(pid)]
    assert workers
    for pid in workers:
        os.kill(int(pid), signal.SIGKILL)
    done = wait_all(procs, timeout=60)
    assert all(code != 0 for code, _ in done.values()), done
    failed = f"node 1 ({hosts.addresses[1]}) stopped: rank 1 failed with exit code -9"
    assert failed in output(tmp_path, "worker", 0), output(tmp_path, "worker", 0)[-3000:]
    assert "rank 1 (local rank 0 on node 1" in output(tmp_path, "worker", 1)
    assert not pids_in(hosts, 0) and not pids_in(hosts, 1)


def test_host_cut_off_is_named_everywhere_then_the_job_resumes(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    procs = start(hosts, tmp_path, "first", command(hosts, *heartbeat_overrides()))
    wait_for_epoch(tmp_path, 2, procs)
    veth = f"{hosts.tag}h2"  # host 2's link, from the host side of its veth pair
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    done = wait_all(procs, timeout=180)
    for i, (code, seconds) in done.items():
        text = output(tmp_path, "first", i)
        assert code != 0 and seconds < 180, (i, code, seconds)
        # the others see host 2's lease end; host 2 itself, cut off from the etcd quorum, names itself lost
        assert f"node 2 ({hosts.addresses[2]}) lost" in text, text[-3000:]
        assert not pids_in(hosts, i), f"processes left on host {i}"
    print(f"cut-off host detected in {max(s for _, s in done.values()):.1f}s")
    subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    resume_and_finish(hosts, tmp_path, stopped_after=2)


def test_a_host_with_another_config_stops_every_host_naming_the_key(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(3)
    procs = {}
    for i in range(3):
        (tmp_path / f"host{i}").mkdir()
        extra = ["Train.learning_rate=0.1"] if i == 1 else []
        log = open(tmp_path / f"mismatch.host{i}.txt", "w")
        procs[i] = hosts.popen(i, command(hosts, *extra), cwd=str(tmp_path / f"host{i}"), stdout=log,
                               stderr=subprocess.STDOUT)
    done = wait_all(procs, timeout=90)
    differs = (f"node 1 ({hosts.addresses[1]}) differs from node 0: config key Train.learning_rate is 0.1 there, "
               "0.05 on node 0")
    for i, (code, _) in done.items():
        text = output(tmp_path, "mismatch", i)
        assert code == 2 and differs in text and "Traceback" not in text, text[-3000:]
        assert not (tmp_path / f"host{i}" / "out").exists()  # stopped before anything was launched


def test_a_second_job_on_a_busy_port_is_refused_on_every_host_within_seconds(netns_hosts, tmp_path):  # noqa: F811
    """Another job holds Train.port + 1 (paddle's store) on the first host: both hosts exit 2 within 15 s with
    one line naming the port and its holder, instead of the second one waiting out Train.peer_timeout (60 s)."""
    hosts = netns_hosts(2)
    holder = hosts.popen(0, [sys.executable, "-c", "import socket, time; s = socket.socket(); "
                             "s.bind(('', 6171)); s.listen(); print('held', flush=True); time.sleep(600)"],
                         stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    procs = start(hosts, tmp_path, "busy", command(hosts, "Train.port=6170"))
    done = wait_all(procs, timeout=60)
    for i, (code, seconds) in done.items():
        text = output(tmp_path, "busy", i)
        errors = [line for line in text.splitlines() if line.startswith("paddledist: error:")]
        assert code == 2 and seconds < 15 and len(errors) == 1, (i, code, seconds, text[-3000:])
        assert "port 6171 (Train.port + 1) on node 0" in errors[0] and "in use" in errors[0], errors[0]
        assert "Traceback" not in text and not (tmp_path / f"host{i}" / "out").exists()

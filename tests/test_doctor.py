"""tools/doctor.py on real jobs: two network-namespace hosts (one 64 MiB all-reduce with its bandwidth, the
training steps, one line per host, exit 0), and the same with the second host absent (named after a short
Train.peer_timeout, exit non-zero); two processes on one machine through paddle's launcher.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.netns import netns_hosts  # noqa: F401  (fixture)
from helpers.failures import output, pids_in, wait_all

REPO = Path(__file__).resolve().parent.parent
DOCTOR = str(REPO / "tools" / "doctor.py")
CONFIG = str(REPO / "configs" / "image_classification.yaml")
LINE = re.compile(r"paddledist doctor: node (\d) \(([\d.]+)\) OK: 1 rank\(s\) here, world size 2; all-reduce of "
                  r"64 MiB across 2 ranks in \d+ ms: ([\d.]+) GB/s \(bus bandwidth [\d.]+ GB/s\); 3 training steps "
                  r"of LeNet on random data \(loss [\d. ]+\), parameters equal on every rank")


def command(addresses, *extra: str) -> list[str]:
    return [sys.executable, DOCTOR, "-c", CONFIG, "-o", f"Train.dist_ips={','.join(addresses)}",
            "Global.output=out", *extra]


def start(hosts, tmp_path: Path, run: str, argv: list[str], which) -> dict:
    procs = {}
    for i in which:
        home = tmp_path / f"host{i}"
        home.mkdir(exist_ok=True)
        log = open(tmp_path / f"{run}.host{i}.txt", "w")
        procs[i] = hosts.popen(i, argv, cwd=str(home), stdout=log, stderr=subprocess.STDOUT)
    return procs


@pytest.mark.multihost
def test_doctor_on_two_hosts_measures_the_all_reduce_and_exits_0(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    procs = start(hosts, tmp_path, "doctor", command(hosts.addresses, "Train.peer_timeout=60"), (0, 1))
    done = wait_all(procs, timeout=120)
    for i, (code, _) in done.items():
        text = output(tmp_path, "doctor", i)
        assert code == 0, text[-3000:]
        [line] = [m for m in LINE.finditer(text)]
        assert (int(line.group(1)), line.group(2)) == (i, hosts.addresses[i])
        assert float(line.group(3)) > 0
        print(line.group(0))
        assert not pids_in(hosts, i)


@pytest.mark.multihost
def test_doctor_names_the_absent_host_and_fails(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    procs = start(hosts, tmp_path, "absent", command(hosts.addresses, "Train.peer_timeout=5"), (0,))
    done = wait_all(procs, timeout=60)
    text = output(tmp_path, "absent", 0)
    assert done[0][0] == 2, text[-3000:]
    assert f"node 1 ({hosts.addresses[1]}) did not join within Train.peer_timeout=5s" in text, text[-3000:]
    assert "paddledist doctor: node" not in text


@pytest.mark.multiproc
def test_doctor_with_two_processes_on_one_machine(tmp_path):
    done = subprocess.run([sys.executable, DOCTOR, "-c", CONFIG, "-o", "Global.output=out", "Global.device=cpu:0,1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"paddledist doctor: node 0 OK: 2 rank\(s\) here, world size 2; all-reduce of 64 MiB across "
                     r"2 ranks in \d+ ms: [\d.]+ GB/s", done.stdout), done.stdout[-3000:]

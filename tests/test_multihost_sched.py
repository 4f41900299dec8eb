"""Real two-host runs where a scheduler names the machines: host names resolved through each host's own
/etc/hosts, the master-address launch (same ranks and parameters as --ips), Kubeflow's PaddleJob and
paddle-operator's variables, and Slurm's. Network-namespace hosts as in test_multihost.py; skips where
namespaces cannot be made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.netns import NetnsHosts, netns_hosts  # noqa: F401  (fixture)
from helpers.hosts import CONFIG, DATA, TRAIN, final_digest, finish, start_all

import pytest

pytestmark = pytest.mark.multihost

FAST = ["Train.epochs_iters=1", "Train.peer_timeout=60", "Train.save_interval=1"]


def name_hosts(hosts: NetnsHosts, names=("node1", "node2")) -> None:
    """Every host resolves the same names to the same addresses, from its own hosts file."""
    for i in range(hosts.count):
        hosts.hosts_file(i, dict(zip(names, hosts.addresses)))


def argv_for(tmp_path: Path, run: str, *overrides: str):
    return lambda i: [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Global.output={tmp_path}/{run}/host{i}",
                      f"Global.dataset_dir={DATA}", *FAST, *overrides]


def train(hosts: NetnsHosts, tmp_path: Path, run: str, *overrides: str, env_for=None) -> dict[int, str]:
    """Run the same command on both hosts (with per-host environments from `env_for`); the outputs."""
    (tmp_path / run).mkdir()
    procs = {}
    for i in range(hosts.count):
        log = open(tmp_path / run / f"host{i}.txt", "w")
        env = {**os.environ, **(env_for(i) if env_for else {})}
        procs[i] = hosts.popen(i, argv_for(tmp_path, run, *overrides)(i), env=env, cwd=str(tmp_path),
                               stdout=log, stderr=subprocess.STDOUT)
    outputs = {}
    for i, proc in procs.items():
        try:
            code = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            code = None
        outputs[i] = (tmp_path / run / f"host{i}.txt").read_text()
        assert code == 0, f"{run}, host {i}:\n{outputs[i][-4000:]}"
    return outputs


def digests(tmp_path: Path, run: str) -> list[str]:
    """Every rank's final-parameter digest, rank i's log on host i (ranks are node-major, one per host)."""
    return [final_digest(tmp_path / run / f"host{i}" / "logs" / f"train.rank{i}.log") for i in range(2)]


def test_host_names_and_both_launch_styles_give_the_same_ranks_and_parameters(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    name_hosts(hosts)
    ips = train(hosts, tmp_path, "ips", "Train.dist_ips=node1,node2")
    master = train(hosts, tmp_path, "master", "Train.dist_ips=node1,node2", "Train.launch_style=master")
    for i, output in ips.items():
        assert f"this node = node {i} of 2 ({hosts.addresses[i]} on eth0, matched a local interface; rank {i}" \
            in output and "machines from Train.dist_ips" in output
        assert f"this node = node {i} of 2 ({hosts.addresses[i]} on eth0" in master[i]
        # paddle's launcher syncs peers through its master only in the --master form (collective.py build_pod)
        assert "Waiting peer start" in master[i] and "Waiting peer start" not in ips[i]
    assert digests(tmp_path, "ips") == digests(tmp_path, "master")
    assert len(set(digests(tmp_path, "ips"))) == 1


def test_dry_run_shows_the_master_form(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    name_hosts(hosts)
    argv = argv_for(tmp_path, "dry", "Train.dist_ips=node1,node2", "Train.launch_style=master")(1) + ["--dry-run"]
    done = hosts.run(1, argv, timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = hosts.addresses
    assert f"-m paddle.distributed.launch --master {a}:6171 --nnodes 2 --rank 1 --host {b}" in done.stdout
    kubeflow = {**os.environ, "PADDLE_MASTER": f"{a}:36543", "PADDLE_NNODES": "2"}
    done = hosts.run(1, argv_for(tmp_path, "dry")(1) + ["--dry-run"], timeout=60, cwd=str(tmp_path), env=kubeflow)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"--master {a}:36543 --nnodes 2 --rank 1 --host {b}" in done.stdout
    assert "--rank 1 is provisional: the meeting in etcd assigns this node's rank (the master's machine first" \
        in done.stdout
    assert "unset PADDLE_MASTER" in done.stdout.splitlines()


def test_kubeflow_paddlejob_variables_alone(netns_hosts, tmp_path):  # noqa: F811
    """As training-operator injects them: worker 0 gets its own pod IP as PADDLE_MASTER, the others the name
    <job>-worker-0; PADDLE_NNODES, PADDLE_JOB_ID; no rank, no machine list."""
    hosts = netns_hosts(2)
    a, b = hosts.addresses
    hosts.hosts_file(1, {"pdjob-worker-0": a})
    masters = {0: f"{a}:36543", 1: "pdjob-worker-0:36543"}
    env = lambda i: {"PADDLE_MASTER": masters[i], "PADDLE_NNODES": "2", "PADDLE_JOB_ID": "pdjob",
                     "POD_IP": hosts.addresses[i]}
    outputs = train(hosts, tmp_path, "kubeflow", env_for=env)
    assert "machines from PADDLE_MASTER and PADDLE_NNODES (Kubeflow PaddleJob)" in outputs[0]
    assert f"this node = node 1 of 2 ({b} on eth0, POD_IP; node rank agreed at the etcd meeting; rank 1" in outputs[1]
    assert len(set(digests(tmp_path, "kubeflow"))) == 1


def test_paddle_operator_variables_alone(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    trainers = ",".join(hosts.addresses)
    env = lambda i: {"POD_IP": hosts.addresses[i], "PADDLE_TRAINER_ID": str(i), "PADDLE_TRAINERS_NUM": "2",
                     "PADDLE_TRAINERS": trainers, "PADDLE_TRAINER_ENDPOINTS": ",".join(
                         f"{ip}:2379" for ip in hosts.addresses), "TRAINING_ROLE": "TRAINER"}
    outputs = train(hosts, tmp_path, "operator", env_for=env)
    for i, output in outputs.items():
        assert f"this node = node {i} of 2 ({hosts.addresses[i]} on eth0, rank from PADDLE_TRAINER_ID" in output
    assert len(set(digests(tmp_path, "operator"))) == 1


def test_slurm_variables_alone(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    name_hosts(hosts, ("node01", "node02"))
    env = lambda i: {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2", "SLURM_NODEID": str(i)}
    outputs = train(hosts, tmp_path, "slurm", env_for=env)
    for i, output in outputs.items():
        assert f"this node = node {i} of 2 ({hosts.addresses[i]} on eth0, rank from SLURM_NODEID" in output
        assert "machines from SLURM_JOB_NODELIST and SLURM_NODEID (Slurm)" in output
    assert len(set(digests(tmp_path, "slurm"))) == 1


def test_a_name_resolving_differently_stops_both_hosts_naming_it(netns_hosts, tmp_path):  # noqa: F811
    """Host 1's hosts file maps node2 to a second address of its own: it still finds itself, but the lists
    differ, and both hosts stop before training, naming node2."""
    hosts = netns_hosts(2)
    a, b = hosts.addresses
    other = b.rsplit(".", 1)[0] + ".200"
    subprocess.run(["ip", "-n", hosts.namespaces[1], "addr", "add", f"{other}/24", "dev", "eth0"], check=True)
    hosts.hosts_file(0, {"node1": a, "node2": b})
    hosts.hosts_file(1, {"node1": a, "node2": other})
    argv = argv_for(tmp_path, "differ", "Train.dist_ips=node1,node2", "Train.peer_timeout=20")
    (tmp_path / "differ").mkdir()
    done = finish(start_all(hosts, range(2), argv, tmp_path), tmp_path, timeout=90)
    for i, (code, output) in done.items():
        assert code == 2, f"host {i}:\n{output[-3000:]}"
        assert f"'node2' resolves to {other} there, to {b} on node 0" in output, output[-3000:]
        assert "Traceback" not in output


def test_a_name_with_only_an_ipv6_address_is_refused(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(1)
    hosts.hosts_file(0, {"node1": hosts.addresses[0], "v6only": "fd00::2"})
    argv = argv_for(tmp_path, "v6", "Train.dist_ips=node1,v6only")(0) + ["--dry-run"]
    done = hosts.run(0, argv, timeout=60, cwd=str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("Train.dist_ips entry 2 host name 'v6only' resolves only to IPv6 (fd00::2) on this machine; "
            "paddle.distributed.launch needs IPv4") in done.stderr
    assert "Traceback" not in done.stderr

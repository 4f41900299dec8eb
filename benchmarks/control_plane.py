"""The etcd control plane at scale on this machine: a real 3-member etcd (the job's own members, started by
cluster.etcdserver.EmbeddedEtcd on 127.0.0.1-3) and N simulated supervisors, each the real meeting
(cluster.meeting.meet) and liveness (cluster.liveness.EtcdPeers) code in threads of this process.

    python benchmarks/control_plane.py --nodes 16,64,256

Per N one JSON line: join_s (until every supervisor holds the plan), detect_s (one supervisor's lease revoked,
as when it stops: until every other one holds the verdict naming it), stop_s (in a second job, one supervisor
tells that its ranks failed: until every other one holds that verdict), hub_cpu (now the three etcd members'
CPU, cores, over --window seconds of steady lease renewals at --interval) and members_rss_mb. The N supervisors
share this process's cores and interpreter lock: every one of them decodes every registration of its
generation (N² watch events in all), so join_s measures that too, where a real machine decodes N.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from typing import Callable

import psutil

from paddledist.cluster import ClusterPlan, ports
from paddledist.cluster.etcdlink import Store
from paddledist.cluster.etcdserver import PEER_OFFSET, EmbeddedEtcd, endpoints
from paddledist.cluster.hello import Hello
from paddledist.cluster.liveness import EtcdPeers
from paddledist.cluster.meeting import meet
from paddledist.config import DeviceSpec

MEMBERS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def free_port() -> int:
    """A client port free on every member address whose peer port (+ PEER_OFFSET) is free too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + PEER_OFFSET < 65536 and all(ports.bind_error(p) is None for p in (port, port + PEER_OFFSET)):
            return port


def plan_of(nodes: tuple, rank: int, job: str, interval_s: float, port: int, etcd: tuple = ()) -> ClusterPlan:
    return ClusterPlan(nodes=nodes, node_rank=rank, ifname="lo", device=DeviceSpec("cpu", (0,)), port=port,
                       job_id=job, peer_timeout=600, source="benchmark", heartbeat_interval=interval_s,
                       heartbeat_timeout=max(10.0, 4 * interval_s), names=nodes, etcd=etcd)


def addresses(n: int) -> tuple:
    return tuple(f"127.1.{k // 250}.{k % 250 + 1}" for k in range(n))


def until(test: Callable[[], bool], start: float, timeout_s: float = 600.0) -> float:
    """Seconds from `start` (time.monotonic) until `test()` holds (polled every 20 ms)."""
    while not test():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError("the control plane did not get there in time")
        time.sleep(0.02)
    return time.monotonic() - start


def join(nnodes: int, job: str, interval_s: float, where: tuple, port: int) -> tuple[float, list]:
    """N supervisors meet in one generation; (seconds until all hold the plan, their started EtcdPeers)."""
    nodes = addresses(nnodes)
    peers: list = [None] * nnodes

    def one(k: int) -> None:
        plan = plan_of(nodes, k, job, interval_s, port, where)
        store = Store(where)
        peers[k] = EtcdPeers(store, meet(store, plan, Hello.of(plan), generation=1)).start()

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(nnodes)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(p is None for p in peers):
        raise RuntimeError("a simulated supervisor did not meet (see its exception above)")
    return time.monotonic() - start, peers


def members_usage(members: list, window_s: float) -> tuple[float, float]:
    """The members' CPU (cores) over `window_s`, and their RSS in MB."""
    procs = [psutil.Process(m.proc.pid) for m in members]
    before, start = [p.cpu_times() for p in procs], time.monotonic()
    time.sleep(window_s)
    after, wall = [p.cpu_times() for p in procs], time.monotonic() - start
    cpu = sum(a.user + a.system - b.user - b.system for a, b in zip(after, before)) / wall
    return cpu, sum(p.memory_info().rss for p in procs) / 2**20


def measure(nnodes: int, members: list, window_s: float, interval_s: float) -> dict:
    where, port = endpoints(members[0].plan), members[0].plan.port
    join_s, peers = join(nnodes, f"bench{nnodes}", interval_s, where, port)
    cpu, rss = members_usage(members, window_s)
    lost, start = peers[-1], time.monotonic()
    lost.met.lease.close()  # revoked, as when its supervisor stops: its key goes and every other one names it
    detect_s = until(lambda: all(p.check() for p in peers[:-1]), start)
    named = all(lost.plan.host in (p.lost or ()) for p in peers[:-1])
    for p in peers:
        p.close()
    _, peers = join(nnodes, f"bench{nnodes}-stop", interval_s, where, port)
    start = time.monotonic()
    peers[0].tell("rank 0 failed with exit code 1")
    stop_s = until(lambda: all(p.check() for p in peers[1:]), start)
    for p in peers:
        p.close()
    return {"nodes": nnodes, "join_s": round(join_s, 3), "detect_s": round(detect_s, 3),
            "stop_s": round(stop_s, 3), "hub_cpu": round(cpu, 4), "members_rss_mb": round(rss, 1),
            "loss_named": named, "interval_s": interval_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="16,64,256", help="comma-separated numbers of simulated supervisors")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of steady renewals for hub_cpu")
    parser.add_argument("--interval", type=float, default=5.0, help="Train.heartbeat_interval of the supervisors")
    args = parser.parse_args()
    home = os.environ["PADDLEDIST_HOME"] = tempfile.mkdtemp(prefix="paddledist-bench-")  # the members' data
    port = free_port()
    member_plans = [plan_of(MEMBERS, k, "bench", args.interval, port) for k in range(len(MEMBERS))]
    members = [EmbeddedEtcd(p, None) for p in member_plans]
    for m in members:
        m.__enter__()
    try:
        Store(endpoints(member_plans[0])).wait_ready(60, "the benchmark's etcd", "/paddledist/")
        for n in (int(x) for x in args.nodes.split(",")):
            print(json.dumps(measure(n, members, args.window, args.interval)), flush=True)
    finally:
        for m in members:
            m.__exit__(None, None, None)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Loopback stand-ins for machines meeting in a real etcd: 127.0.0.x addresses all answer on lo."""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import time

from paddledist.cluster import ClusterPlan, LocalAddress
from paddledist.cluster.etcdjob import EtcdJob
from paddledist.config import DeviceSpec
from paddledist.errors import UserError

_JOBS = itertools.count()


def run_nodes(endpoint: str, *plans: ClusterPlan, facts=None, keep=lambda peers: None, delays=None) -> list:
    """Meet every plan in its own thread in the etcd at `endpoint` (a job id of its own per call): the result per
    node is `keep(peers)` (None by default) or the UserError message. `facts`: per-node fingerprints; `delays`:
    seconds each node waits before it comes."""
    job = f"loop{os.getpid()}-{next(_JOBS)}"
    results: list = [None] * len(plans)

    def one(i: int) -> None:
        mine = dataclasses.replace(plans[i], job_id=job, etcd=(endpoint,))
        time.sleep(delays[i] if delays else 0)
        try:
            with EtcdJob(mine, None) as etcd:
                peers = etcd.meet(mine, facts[i] if facts else None)
                results[i] = keep(peers)
                peers.close()
        except UserError as e:
            results[i] = str(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


LAN = (LocalAddress("lo", "127.0.0.1"), LocalAddress("eth0", "10.0.0.2"))


def master_node(address: str, port: int, nnodes: int, rank=None, timeout: int = 10) -> ClusterPlan:
    nodes = ["127.0.0.1"] + [""] * (nnodes - 1)
    node_rank = 0 if address == "127.0.0.1" else (rank or 1)
    nodes[node_rank] = address
    return ClusterPlan(nodes=tuple(nodes), node_rank=node_rank, ifname="lo", device=DeviceSpec("cpu", (0,)),
                       port=port, job_id="t", peer_timeout=timeout, source="test", style="master",
                       master_port=port + 2, names=(f"127.0.0.1:{port + 2}",), origin="Train.dist_master",
                       agreed=False, platform_rank=rank, heartbeat_interval=0.5, heartbeat_timeout=3)


def meet(endpoint: str, *plans: ClusterPlan) -> list:
    """Meet every plan: the agreed (nodes, node_rank, agreed), or the UserError message."""
    return run_nodes(endpoint, *plans, keep=lambda peers: (peers.plan.nodes, peers.plan.node_rank, peers.plan.agreed))

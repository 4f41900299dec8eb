"""Loopback stand-ins for machines: 127.0.0.x addresses all answer on lo."""

from __future__ import annotations

import threading
from paddledist.cluster import ClusterPlan, LocalAddress, preflight
from paddledist.config import DeviceSpec
from paddledist.errors import UserError


def run_nodes(*plans: ClusterPlan, facts=None, keep=lambda peers: None) -> list:
    """Preflight every plan in its own thread; the result per node is `keep(peers)` (None by default) or the
    UserError message. `facts`: per-node fingerprints."""
    results: list = [None] * len(plans)

    def one(i: int) -> None:
        try:
            peers = preflight(plans[i], facts[i] if facts else None)
            results[i] = keep(peers)
            if peers is not None:
                peers.close()
        except UserError as e:
            results[i] = str(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results




LAN = (LocalAddress("lo", "127.0.0.1"), LocalAddress("eth0", "10.0.0.2"))


def master_node(address: str, port: int, nnodes: int, rank=None, timeout: int = 10) -> ClusterPlan:
    nodes = ["127.0.0.1"] + [""] * (nnodes - 1)
    node_rank = 0 if address == "127.0.0.1" else (rank or 1)
    nodes[node_rank] = address
    return ClusterPlan(nodes=tuple(nodes), node_rank=node_rank, ifname="lo", device=DeviceSpec("cpu", (0,)),
                       port=port, job_id="t", peer_timeout=timeout, source="test", style="master",
                       master_port=port + 2, names=(f"127.0.0.1:{port + 2}",), origin="Train.dist_master",
                       agreed=False, platform_rank=rank)


def meet(*plans: ClusterPlan) -> list:
    """Preflight every plan in its own thread: the agreed (nodes, node_rank, agreed), or the UserError message."""
    return run_nodes(*plans, keep=lambda peers: (peers.plan.nodes, peers.plan.node_rank, peers.plan.agreed))

"""cluster.plan(cfg): which machines take part, which one this is, its interface, devices and port."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from paddledist.cluster.addresses import normalise_ip, validate_dist_ips
from paddledist.cluster.interfaces import LocalAddress, local_addresses
from paddledist.config import Config, DeviceSpec, parse_device
from paddledist.config.schema import TrainConfig
from paddledist.errors import UserError

LOCAL_HOST = "127.0.0.1"


@dataclass(frozen=True)
class ClusterPlan:
    """Runtime facts about the job's machines; the config itself stays untouched."""

    nodes: tuple[str, ...]
    """Every machine's address in rank order (the first hosts rank 0); one entry for a one-machine job."""
    node_rank: int
    """Index of this machine in `nodes`."""
    ifname: Optional[str]
    """Interface holding this machine's address (for GLOO/NCCL_SOCKET_IFNAME); None when unknown."""
    device: DeviceSpec
    """Device kind and ids on every machine; one worker process per id."""
    port: int
    """Train.port: the first machine's preflight port; paddle's launcher uses the ports just above it."""
    job_id: str
    """Train.job_id."""
    peer_timeout: int
    """Seconds to wait for every machine before failing, naming the missing ones."""
    source: str
    """How this machine was identified, for messages."""
    heartbeat_interval: float = TrainConfig.heartbeat_interval
    """Train.heartbeat_interval: seconds between the supervisors' heartbeats."""
    heartbeat_timeout: float = TrainConfig.heartbeat_timeout
    """Train.heartbeat_timeout: seconds of silence before a machine is declared lost."""

    @property
    def host(self) -> str:
        return self.nodes[self.node_rank]

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def nproc_per_node(self) -> int:
        return self.device.nproc

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def ranks(self) -> range:
        """Global ranks of this machine's processes (paddle's --ips order: node-major)."""
        first = self.node_rank * self.nproc_per_node
        return range(first, first + self.nproc_per_node)

    def summary(self) -> str:
        nic = f"on {self.ifname}" if self.ifname else "interface unknown"
        first, last = self.ranks[0], self.ranks[-1]
        ranks = f"rank {first}" if first == last else f"ranks {first}..{last}"
        return (f"this node = node {self.node_rank} of {self.nnodes} ({self.host} {nic}, {self.source}; "
                f"{ranks} of world size {self.world_size})")


def plan(cfg: Config, local: Optional[Sequence[LocalAddress]] = None,
         env: Optional[Mapping[str, str]] = None) -> ClusterPlan:
    """Validate Train.dist_ips and find this machine in it; `local`/`env` default to the real ones."""
    local = tuple(local_addresses() if local is None else local)
    env = os.environ if env is None else env
    if cfg.Train.dist_ips:
        nodes = validate_dist_ips(cfg.Train.dist_ips)
        node_rank, source = _find_self(nodes, local, cfg.Train.node_ip, env.get("POD_IP"))
    else:
        nodes, node_rank, source = (LOCAL_HOST,), 0, "single machine, no Train.dist_ips"
    return ClusterPlan(nodes=nodes, node_rank=node_rank, ifname=_ifname_of(nodes[node_rank], local),
                       device=parse_device(cfg.Global.device), port=cfg.Train.port, job_id=cfg.Train.job_id,
                       peer_timeout=cfg.Train.peer_timeout, source=source,
                       heartbeat_interval=cfg.Train.heartbeat_interval, heartbeat_timeout=cfg.Train.heartbeat_timeout)


def _find_self(nodes: tuple[str, ...], local: Sequence[LocalAddress], node_ip: Optional[str],
               pod_ip: Optional[str]) -> tuple[int, str]:
    """Index of this machine in `nodes`: Train.node_ip, else POD_IP if listed, else the one local match."""
    if node_ip:
        return _listed(node_ip, nodes, "Train.node_ip"), "Train.node_ip"
    pod = _maybe_ip(pod_ip)
    if pod in nodes:  # platforms set POD_IP for every pod; it only counts when it is listed
        return nodes.index(pod), "POD_IP"
    held = sorted({a.address for a in local} & set(nodes), key=nodes.index)
    if len(held) == 1:
        return nodes.index(held[0]), "matched a local interface"
    if not held:
        raise UserError(f"this machine is not in Train.dist_ips {','.join(nodes)}: its addresses are "
                        f"{_describe(local)}; add one of them to the list, or set -o Train.node_ip=<listed address>")
    mine = _describe([a for a in local if a.address in held])
    raise UserError(f"this machine holds several Train.dist_ips addresses ({mine}); "
                    "say which node it is with -o Train.node_ip=<one of them>")


def _listed(ip: str, nodes: tuple[str, ...], key: str) -> int:
    canonical = _maybe_ip(ip)
    if canonical is None:
        raise UserError(f"{key}={ip!r} is not an IP address; set it to this machine's address in Train.dist_ips")
    if canonical not in nodes:
        raise UserError(f"{key}={ip} is not in Train.dist_ips {','.join(nodes)}; "
                        "set it to this machine's listed address")
    return nodes.index(canonical)


def _maybe_ip(text: Optional[str]) -> Optional[str]:
    try:
        return normalise_ip(text) if text else None
    except ValueError:
        return None


def _ifname_of(address: str, local: Sequence[LocalAddress]) -> Optional[str]:
    return next((a.ifname for a in local if a.address == address), None)


def _describe(local: Sequence[LocalAddress]) -> str:
    return ", ".join(f"{a.address} on {a.ifname}" for a in local) or "none found"

"""cluster.plan(cfg): which machines take part, which one this is, its interface, devices and port."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from paddledist.cluster.addresses import check_address, resolve, validate_dist_ips
from paddledist.cluster.interfaces import LocalAddress, local_addresses
from paddledist.cluster.sources import Source, find_source
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
    """Train.port: the job's etcd clients' port (peers: + 50); paddle's launcher uses the ports just above it."""
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
    style: str = "ips"
    """How paddle's launcher is told the machines: ips (--ips list) or master (--master, --nnodes, --rank)."""
    master_port: int = 0
    """paddle's --master port on nodes[0] (master style): the given one, else Train.port + 1."""
    names: tuple = ()
    """The machines as given (host names, addresses, or the master's host:port), for messages."""
    origin: str = "Train.dist_ips"
    """What named the machines (a config key or a platform's variables), for the start-up log."""
    agreed: bool = True
    """False until the etcd meeting has placed every node (master address or etcd without a list); `nodes` then
    holds only the master's address and this machine's own."""
    platform_rank: Optional[int] = None
    """This node's rank as the platform gave it (SLURM_NODEID, PADDLE_TRAINER_ID), or None."""
    min_nodes: int = 0
    """Train.nnodes MIN:MAX: in master-address mode, once Train.peer_timeout has passed, node 0 continues with as
    few as this many machines; with a Train.dist_ips pool, the fewest the survivors of a loss re-form with
    (cluster/etcdjob.py); 0: every one of `nnodes` must come."""
    pool: tuple = ()
    """A Train.dist_ips pool (Train.nnodes MIN:MAX with a list): every listed address, in list order; kept when the
    survivors of a loss re-form on fewer (a machine that comes back is taken in again, up to the list)."""
    etcd: tuple = ()
    """The endpoints (host:port) of the user's etcd (Train.dist_master=etcd://...); empty: the job's own."""
    secret: Optional[bytes] = field(default=None, repr=False, compare=False)
    """The job secret (cluster/auth.py) the job's etcd is secured with, None without one; set by the launch
    stage, never printed."""

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

    @property
    def launcher_port(self) -> tuple[int, str]:
        """The port node 0's paddle launcher listens on (its TCP store, or paddle's --master), and its name."""
        return ((self.master_port, "paddle's --master port") if self.style == "master"
                else (self.port + 1, "Train.port + 1"))

    def who(self, node: Optional[int] = None) -> str:
        """"node N (address)", the way every message names a machine; this one's without `node`."""
        node = self.node_rank if node is None else node
        address = self.nodes[node] if isinstance(node, int) and 0 <= node < self.nnodes else "?"
        return f"node {node} ({address})"

    def summary(self) -> str:
        nic = f"on {self.ifname}" if self.ifname else "interface unknown"
        first, last = self.ranks[0], self.ranks[-1]
        ranks = f"rank {first}" if first == last else f"ranks {first}..{last}"
        if not self.agreed and self.node_rank != 0:
            return (f"this node = a node of {self.nnodes} ({self.host} {nic}, {self.source}; world size "
                    f"{self.world_size}); machines from {self.origin}")
        origin = f"; machines from {self.origin}" if self.nnodes > 1 else ""
        return (f"this node = node {self.node_rank} of {self.nnodes} ({self.host} {nic}, {self.source}; "
                f"{ranks} of world size {self.world_size}){origin}")


def plan(cfg: Config, local: Optional[Sequence[LocalAddress]] = None,
         env: Optional[Mapping[str, str]] = None) -> ClusterPlan:
    """Find the job's machines (config, else a platform's variables), resolve them and place this machine among
    them; `local`/`env` default to the real ones."""
    local = tuple(local_addresses() if local is None else local)
    env = os.environ if env is None else env
    source = find_source(cfg, env)
    if source is None:
        nodes, node_rank, how = (LOCAL_HOST,), 0, "single machine, no Train.dist_ips"
        source = Source("ips", (LOCAL_HOST,), 1, origin="one machine")
    elif source.names:
        nodes = validate_dist_ips(source.names, source.key)
        node_rank, how = _find_self(nodes, local, cfg.Train.node_ip, env.get("POD_IP"), source)
    else:
        nodes, node_rank, how = _master_side(source, local, cfg.Train.node_ip, env.get("POD_IP"))
    master_port = cfg.Train.port + 1 if source.etcd else _master_port(source, cfg.Train.port)
    return ClusterPlan(nodes=nodes, node_rank=node_rank, ifname=_ifname_of(nodes[node_rank], local),
                       device=parse_device(cfg.Global.device), port=cfg.Train.port, job_id=cfg.Train.job_id,
                       peer_timeout=cfg.Train.peer_timeout, source=how,
                       heartbeat_interval=cfg.Train.heartbeat_interval, heartbeat_timeout=cfg.Train.heartbeat_timeout,
                       style=source.style, master_port=master_port, names=source.names or (source.master,),
                       origin=source.origin + (f"; {source.note}" if source.note else ""),
                       agreed=bool(source.names), platform_rank=source.rank, min_nodes=source.min_nodes,
                       pool=nodes if source.names and source.min_nodes else (), etcd=source.etcd)


def _master_port(source: Source, port: int) -> int:
    """paddle's --master port: the one given, else Train.port + 1 on the first machine of a list."""
    if not source.master:
        return port + 1
    text = source.master.rsplit(":", 1)[1]
    if not text.isdigit() or not 0 < int(text) < 65536 or int(text) == port:
        raise UserError(f"{source.key}={source.master}: the port must be a free TCP port other than Train.port "
                        f"({port}), where the job's etcd listens; choose another for either")
    return int(text)


def _master_side(source: Source, local: Sequence[LocalAddress], node_ip: Optional[str],
                 pod_ip: Optional[str]) -> tuple[tuple[str, ...], int, str]:
    """Nodes known before the etcd meeting: the master's address as node 0 and this machine's own address at its
    rank (the platform's, 0 on the master, else provisional until node 0 assigns it)."""
    host = source.master.rsplit(":", 1)[0].strip("[]")
    master = check_address(host, f"{source.key} host", multi=source.nnodes > 1)
    mine, how = _own_address(master, local, node_ip, pod_ip)
    if mine == master:
        if source.rank not in (None, 0):
            raise UserError(f"this machine holds the master address {master} but the platform gives it rank "
                            f"{source.rank}; the master's machine is node 0")
        rank = 0
    elif source.rank == 0:
        raise UserError(f"the platform makes this machine node 0, but the master address {master} is not one of "
                        "its addresses; point the master at the first machine")
    else:
        rank = source.rank or 1
        how += "; node rank agreed at the etcd meeting" if source.rank is None else "; node rank from the platform"
    nodes = [master] + [""] * (source.nnodes - 1)
    nodes[rank] = mine
    return tuple(nodes), rank, how


def _own_address(master: str, local: Sequence[LocalAddress], node_ip: Optional[str],
                 pod_ip: Optional[str]) -> tuple[str, str]:
    """Train.node_ip, else POD_IP, else the master's address when this machine holds it, else the address this
    machine reaches the master from (the kernel's route choice; nothing is sent)."""
    if node_ip:
        return check_address(node_ip, "Train.node_ip", multi=True), "Train.node_ip"
    if pod_ip:
        return check_address(pod_ip.strip(), "POD_IP", multi=True), "POD_IP"
    if master in {a.address for a in local}:
        return master, "holds the master address"
    return route_source(master), "the address it reaches the master from"


def route_source(address: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, 9))  # UDP connect only picks the route and source address
        except OSError as e:
            raise UserError(f"this machine has no route to the master {address} ({e.strerror}); check the network, "
                            "or set -o Train.node_ip=<this machine's address>") from None
        return probe.getsockname()[0]


def _find_self(nodes: tuple[str, ...], local: Sequence[LocalAddress], node_ip: Optional[str],
               pod_ip: Optional[str], source: Source) -> tuple[int, str]:
    """Index of this machine in `nodes`: Train.node_ip, else the platform's rank, else POD_IP if listed, else
    the one local match."""
    if node_ip:
        return _listed(node_ip, nodes, "Train.node_ip"), "Train.node_ip"
    held = sorted({a.address for a in local} & set(nodes), key=nodes.index)
    if source.rank is not None:
        if held and nodes[source.rank] not in held:
            raise UserError(f"{source.rank_var}={source.rank} makes this machine node {source.rank} "
                            f"({_listing(source.names[source.rank:source.rank + 1], nodes[source.rank:])}), but it "
                            f"holds {', '.join(held)}; check {source.key}")
        return source.rank, f"rank from {source.rank_var}"
    pod = _maybe_ip(pod_ip)
    if pod in nodes:  # platforms set POD_IP for every pod; it only counts when it is listed
        return nodes.index(pod), "POD_IP"
    if len(held) == 1:
        return nodes.index(held[0]), "matched a local interface"
    listed = _listing(source.names, nodes)
    if not held:
        raise UserError(f"this machine is not in {source.key} {listed}: its addresses are "
                        f"{_describe(local)}; add one of them to the list, or set -o Train.node_ip=<listed address>")
    mine = _describe([a for a in local if a.address in held])
    raise UserError(f"this machine holds several {source.key} addresses ({mine}); "
                    "say which node it is with -o Train.node_ip=<one of them>")


def _listed(ip: str, nodes: tuple[str, ...], key: str) -> int:
    canonical = _maybe_ip(ip)
    if canonical is None:
        raise UserError(f"{key}={ip!r} is not an IP address or a host name that resolves here; set it to this "
                        "machine's address in Train.dist_ips")
    if canonical not in nodes:
        raise UserError(f"{key}={ip} is not in Train.dist_ips {','.join(nodes)}; "
                        "set it to this machine's listed address")
    return nodes.index(canonical)


def _maybe_ip(text: Optional[str]) -> Optional[str]:
    try:
        return resolve(text.strip(), "address") if text else None
    except UserError:
        return None


def _listing(names: Sequence[str], nodes: Sequence[str]) -> str:
    """`node1 (10.0.0.1),node2 (10.0.0.2)` for host names, the plain list for addresses."""
    return ",".join(n if n == ip else f"{n} ({ip})" for n, ip in zip(names, nodes))


def _ifname_of(address: str, local: Sequence[LocalAddress]) -> Optional[str]:
    return next((a.ifname for a in local if a.address == address), None)


def _describe(local: Sequence[LocalAddress]) -> str:
    return ", ".join(f"{a.address} on {a.ifname}" for a in local) or "none found"

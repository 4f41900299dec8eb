"""A control-plane simulator: N node supervisors' control planes on loopback addresses 127.0.x.y, running the
real paddledist.cluster code (preflight with its hello checks, heartbeats, the loss and stop relays, all-done),
with no paddle and no workers. Node 0, the hub, runs alone in its own process, so that the CPU time and memory
read off that process are the hub's own; the other nodes run as threads, up to NODES_PER_PROCESS a process.

Every process answers commands over a pipe and reports times from time.monotonic, which on Linux is one clock
for every process of the machine. Used by benchmarks/control_plane.py and tests/test_control_plane.py.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from multiprocessing.connection import Connection
from typing import Optional, Sequence

from paddledist.cluster import ClusterPlan, Peers, preflight
from paddledist.cluster.fdlimit import SPARE, ensure_open_files
from paddledist.config import DeviceSpec
from paddledist.testing.ports import free_ports

NODES_PER_PROCESS = 512
FDS_PER_NODE = 4
"""A node's connection, its heartbeat selector and the selector's wake-up pair."""
REPLY_S = 600.0
"""The longest the simulator waits for one step on every process before failing."""
_POLL_S = 0.005
"""How often a process looks at its nodes' verdicts: the resolution of detect_s and stop_s."""


def address(i: int) -> str:
    """Node i's own loopback address: 127.0.0.1 for node 0, then 127.0.0.2 .. 127.0.0.254, 127.0.1.1 .."""
    return f"127.0.{i // 254}.{i % 254 + 1}"


def sim_plan(nodes: tuple[str, ...], rank: int, port: int, interval_s: float, timeout_s: float,
             secret: Optional[bytes] = None) -> ClusterPlan:
    """The plan each simulated node computes, as from Train.dist_ips on a real cluster (one shared tuple); with
    `secret`, every connection is authenticated and every message sealed (cluster/auth.py)."""
    return ClusterPlan(nodes=nodes, node_rank=rank, ifname="lo", device=DeviceSpec("cpu", (0,)), port=port,
                       job_id="sim", peer_timeout=300, source="simulated node", heartbeat_interval=interval_s,
                       heartbeat_timeout=timeout_s, secret=secret)


class Simulation:
    """N simulated nodes of one job, in processes started and ready; `join()` runs the preflight on all."""

    def __init__(self, nnodes: int, interval_s: float = 5.0, timeout_s: float = 60.0,
                 per_process: int = NODES_PER_PROCESS, secret: Optional[bytes] = None) -> None:
        if nnodes < 2:
            raise ValueError("a simulated job needs at least 2 nodes")
        self.nnodes, self.port = nnodes, free_ports(2)
        ranks = list(range(1, nnodes))
        self.groups = [[0]] + [ranks[i:i + per_process] for i in range(0, len(ranks), per_process)]
        context = multiprocessing.get_context("spawn")  # no threads or locks inherited from the caller
        self.conns: list[Connection] = []
        self.procs = []
        for group in self.groups:
            mine, theirs = context.Pipe()
            args = (theirs, group, nnodes, self.port, interval_s, timeout_s, secret)
            proc = context.Process(target=_serve_group, args=args, name=f"paddledist-sim-{group[0]}", daemon=True)
            proc.start()
            self.conns.append(mine)
            self.procs.append(proc)
        self._gather("ready")

    def __enter__(self) -> "Simulation":
        return self

    def __exit__(self, *_) -> None:
        self.close()

    @property
    def hub_pid(self) -> int:
        return self.procs[0].pid

    def join(self) -> float:
        """Seconds from telling every node to start its preflight until the last one holds its links."""
        start = time.monotonic()
        replies = self._ask_all("join")
        errors = [e for r in replies for e in r["errors"]]
        if errors:
            raise RuntimeError(f"{len(errors)} node(s) failed to join, first: {errors[0]}")
        return max(r["at"] for r in replies) - start

    def detect(self, rank: int) -> dict:
        """Kill node `rank` (its connection closes and nothing more is said, as after SIGKILL): seconds until
        every other node holds a verdict, and how many name that node."""
        return self._watched(rank, f"node {rank} ({address(rank)}) lost", ("kill", rank))

    def stop(self, rank: int, reason: str = "rank 0 failed with exit code 1") -> dict:
        """Node `rank`'s own ranks fail (it tells the hub, which relays): seconds until every other node holds
        the verdict its supervisor would act on, and how many name that node."""
        return self._watched(rank, f"node {rank} ({address(rank)}) stopped: {reason}", ("fail", rank, reason))

    def all_done(self) -> float:
        """Every node finishes cleanly at once: seconds from the last node saying "done" until every node
        heard "all done" (RuntimeError when any node's outcome is a failure)."""
        replies = self._ask_all("finish")
        failed = [o for r in replies for o in r["failures"]]
        if failed:
            raise RuntimeError(f"{len(failed)} node(s) did not end cleanly, first: {failed[0]}")
        return max(r["last"] for r in replies) - max(r["started"] for r in replies)

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("quit",))
            except OSError:
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)

    def _watched(self, rank: int, expect: str, action: tuple) -> dict:
        self._ask_all("watch", rank, expect)
        self._send(self._group_of(rank), action)
        began = self._receive(self._group_of(rank))
        replies = self._ask_all("collect")
        unnamed = [v for r in replies for v in r["unnamed"]]
        return {"s": max(r["last"] for r in replies) - began, "named": sum(r["named"] for r in replies),
                "others": self.nnodes - 1, "unnamed": unnamed[:3]}

    def _group_of(self, rank: int) -> int:
        return next(i for i, group in enumerate(self.groups) if rank in group)

    def _ask_all(self, *command) -> list:
        for i in range(len(self.conns)):
            self._send(i, command)
        return [self._receive(i) for i in range(len(self.conns))]

    def _gather(self, expected: str) -> None:
        for i in range(len(self.conns)):
            reply = self._receive(i)
            if reply != expected:
                raise RuntimeError(f"simulator process {i} answered {reply!r}")

    def _send(self, i: int, command: tuple) -> None:
        self.conns[i].send(command)

    def _receive(self, i: int):
        if not self.conns[i].poll(REPLY_S):
            raise RuntimeError(f"simulator process {i} (nodes {self.groups[i][0]}..) gave no answer in {REPLY_S:g}s")
        reply = self.conns[i].recv()
        if isinstance(reply, Exception):
            raise RuntimeError(f"simulator process {i}: {reply}")
        return reply


def _serve_group(conn: Connection, ranks: Sequence[int], nnodes: int, port: int, interval_s: float,
                 timeout_s: float, secret: Optional[bytes]) -> None:
    """One simulator process: its nodes answer the parent's commands until "quit"."""
    ensure_open_files(SPARE + FDS_PER_NODE * len(ranks), f"a simulator process of {len(ranks)} nodes")
    nodes = tuple(address(i) for i in range(nnodes))
    group = _Group([sim_plan(nodes, r, port, interval_s, timeout_s, secret) for r in ranks])
    conn.send("ready")
    while True:
        command, *args = conn.recv()
        if command == "quit":
            group.close()
            return
        try:
            conn.send(getattr(group, command)(*args))
        except Exception as e:  # reported to the parent, which fails naming it
            conn.send(RuntimeError(f"{command}: {type(e).__name__}: {e}"))


class _Group:
    """The simulated nodes of one process, by rank."""

    def __init__(self, plans: list[ClusterPlan]) -> None:
        self.plans = {p.node_rank: p for p in plans}
        self.peers: dict[int, Peers] = {}
        self._watch: Optional[threading.Thread] = None
        self._watched: list[int] = []
        self._seen: dict[int, float] = {}
        """Rank -> when its verdict was first seen."""
        self._expect = ""

    def join(self) -> dict:
        """Every node's preflight at once, each on its own thread as each supervisor on its own machine."""
        done: dict[int, float] = {}
        errors: list[str] = []

        def one(rank: int) -> None:
            try:
                self.peers[rank] = preflight(self.plans[rank])
                done[rank] = time.monotonic()
            except Exception as e:  # a UserError names what went wrong; the parent reports the first
                errors.append(f"node {rank}: {e}")

        threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in self.plans]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for peers in self.peers.values():
            peers.start()
        return {"at": max(done.values(), default=0.0), "errors": errors}

    def kill(self, rank: int) -> float:
        began = time.monotonic()
        self.peers.pop(rank).close(drain_s=0)
        return began

    def fail(self, rank: int, reason: str) -> float:
        began = time.monotonic()
        self.peers.pop(rank).failed(reason)
        return began

    def watch(self, skip: int, expect: str) -> str:
        """Start noting when each node (but `skip`) holds a verdict; `collect` waits for all."""
        self._watched = [r for r in self.peers if r != skip]
        self._seen, self._expect = {}, expect
        self._watch = threading.Thread(target=self._note, args=(self._watched,), daemon=True)
        self._watch.start()
        return "watching"

    def collect(self) -> dict:
        """After every watched node holds a verdict: when the last did, and how many name the expected node;
        then every node stops, as its runner does on a verdict."""
        self._watch.join()
        verdicts = {r: self.peers[r].verdict or "no verdict" for r in self._watched}
        unnamed = [f"node {r}: {v}" for r, v in verdicts.items() if not v.startswith(self._expect)]
        for peers in self.peers.values():
            peers.failed(None)
        return {"last": max(self._seen.values(), default=0.0), "named": len(verdicts) - len(unnamed),
                "unnamed": unnamed[:3]}

    def finish(self) -> dict:
        """Every node here finishes cleanly at once (each waits for "all done", as its runner does)."""
        ended: dict[int, tuple] = {}

        def one(rank: int) -> None:
            ended[rank] = (self.peers[rank].finish(), time.monotonic())

        threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in self.peers]
        for t in threads:
            t.start()
        started = time.monotonic()  # by now every node here has said "done"
        for t in threads:
            t.join()
        return {"started": started, "last": max(at for _, at in ended.values()),
                "failures": [f"node {r}: {outcome}" for r, (outcome, _) in ended.items() if outcome]}

    def close(self) -> None:
        for peers in self.peers.values():
            peers.close(drain_s=0)

    def _note(self, watched: list[int]) -> None:
        pending, deadline = list(watched), time.monotonic() + REPLY_S
        while pending and time.monotonic() < deadline:
            now = time.monotonic()
            for r in pending:
                if self.peers[r].verdict is not None:
                    self._seen[r] = now
            pending = [r for r in pending if r not in self._seen]
            time.sleep(_POLL_S)

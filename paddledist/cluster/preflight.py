"""Preflight: before anything trains, every machine meets the first one on Train.port, bounded in time.

Node 0 checks that Train.port and Train.port + 1 are free here (naming the process that holds one), then
listens on Train.port; every other node connects (retrying) and says who it is and what it runs: job id, node
list, device layout, and a fingerprint (versions, resolved config, dataset lists; see fingerprint.py). When
all have joined and agree, node 0 answers "ok" to each and everyone launches; the connections stay open for
the heartbeats (heartbeat.py). Otherwise every node fails with one line naming the missing or differing
node and what differs, instead of paddle's launcher blocking forever. Plain TCP and JSON lines; no paddle.

Node 0 reads the hellos on a selector (epoll on Linux, no descriptor limit), in whatever order they arrive, so a
connection that says nothing delays nobody; its listen backlog and open-file limit are sized to the job.
"""

from __future__ import annotations

import dataclasses
import errno
import selectors
import socket
import time
from typing import Optional

from paddledist.cluster import fdlimit, ports, rendezvous
from paddledist.cluster.fingerprint import differences
from paddledist.cluster.heartbeat import Peers
from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.wire import LineSocket
from paddledist.errors import UserError

_REPLY_GRACE_S = 10.0
"""A joining node waits this much beyond its own timeout, so node 0's verdict (with names) reaches it."""
REFUSAL_WAIT_S = 30.0
"""How long node 0, refusing to start, waits to tell the joining nodes why."""
_MAX_SHOWN = 4
"""Differences listed in one message."""
_HELLO_S = 5.0
"""How long node 0 waits for a new connection's first line before dropping it as not one of ours."""


def preflight(plan: ClusterPlan, facts: Optional[dict] = None) -> Optional[Peers]:
    """Return when every machine is present and agrees: the heartbeat links (not yet started; their `plan` is
    the agreed one, with every node's rank in master-address mode), or None for a one-machine job. Raise
    UserError naming what is wrong. `facts`: this node's fingerprint, compared too."""
    if plan.nnodes < 2:
        return None
    mine = hello(plan, facts)
    fdlimit.ensure_open_files(fdlimit.needed_by(plan.nnodes, plan.node_rank), f"node {plan.node_rank} "
                              f"({plan.host}) of {plan.nnodes} machines")
    if plan.node_rank == 0:
        _check_ports_or_refuse(plan)
        links, plan = _serve(plan, mine)
    else:
        link, plan = _join(plan, mine)
        links = {0: link}
    return Peers(plan, links, plan.heartbeat_interval, plan.heartbeat_timeout)


def hello(plan: ClusterPlan, facts: Optional[dict] = None) -> dict:
    """What a node says about itself; node 0 compares it with its own view (the resolved machine list too)."""
    return {"job": plan.job_id, "nodes": list(plan.nodes), "node": plan.node_rank, "names": list(plan.names),
            "address": plan.host, "rank": plan.platform_rank, "agreed": plan.agreed, "style": plan.style,
            "master_port": plan.master_port, "origin": plan.origin,
            "kind": plan.device.kind, "nproc": plan.nproc_per_node, "facts": facts or {}}


def mismatch(mine: dict, theirs: dict) -> Optional[str]:
    """Why a joining node cannot be part of this job, or None."""
    who = (f"node {theirs.get('node')} ({_address(mine, theirs.get('node'))})" if mine.get("agreed", True)
           else f"the machine at {theirs.get('address')}")
    for key, what in (("job", "Train.job_id"), ("kind", "Global.device kind"),
                      ("nproc", "number of processes per machine (Global.device ids)")):
        if theirs.get(key) != mine.get(key):
            return (f"{who} has {what} {_show(theirs.get(key))}, node 0 has {_show(mine.get(key))}; "
                    "run the same config on every machine")
    different = rendezvous.nodes_mismatch(who, mine, theirs)
    if different:
        return different
    if not isinstance(theirs.get("node"), int) or not 0 < theirs["node"] < len(mine["nodes"]):
        return f"a peer claims to be node {theirs.get('node')!r}, which is not a joining node"
    found = differences(mine.get("facts") or {}, theirs.get("facts") or {})
    if found:
        more = f" (and {len(found) - _MAX_SHOWN} more)" if len(found) > _MAX_SHOWN else ""
        return (f"{who} differs from node 0: {'; '.join(found[:_MAX_SHOWN])}{more}; every machine needs the same "
                "code, config and dataset")
    return None


def _show(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _address(mine: dict, node: object) -> str:
    nodes = mine["nodes"]
    return nodes[node] if isinstance(node, int) and 0 <= node < len(nodes) else "?"


def check_ports_free(plan: ClusterPlan) -> None:
    """Node 0 serves the preflight on Train.port, and rank 0 paddle's TCP store on Train.port + 1 (ips style) or
    its launcher paddle's master on the master port (master style)."""
    second = ((plan.master_port, "paddle's --master port") if plan.style == "master"
              else (plan.port + 1, "Train.port + 1"))
    for port, what in ((plan.port, "Train.port"), second):
        error = ports.bind_error(port)
        if error is not None:
            held = ports.describe_holders(port) if error.errno == errno.EADDRINUSE else error.strerror
            raise UserError(f"port {port} ({what}) on node 0 ({plan.host}) is in use, {held}; stop that process "
                            "or choose another -o Train.port=... (the same on every machine)")


def _check_ports_or_refuse(plan: ClusterPlan) -> None:
    """check_ports_free; when it fails but Train.port itself is free (the other port is held, e.g. by another
    job's paddle store), the joining nodes are told why on Train.port for up to REFUSAL_WAIT_S, instead of
    waiting out their Train.peer_timeout and blaming node 0's silence."""
    try:
        check_ports_free(plan)
    except UserError as e:
        if ports.bind_error(plan.port) is None:
            with _Door(_listen(plan.port, plan.nnodes)) as door:
                deadline = time.monotonic() + min(plan.peer_timeout, REFUSAL_WAIT_S)
                _tell_everyone(door, plan, {}, set(), deadline, {"ok": False, "error": str(e)})
        raise


def _listen(port: int, nnodes: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
        sock.listen(max(64, nnodes))  # every machine may connect at once; the kernel caps it at somaxconn
    except OSError as e:
        sock.close()
        raise UserError(f"node 0 cannot listen on Train.port {port} ({e.strerror}); another job may be "
                        "running: stop it or choose another -o Train.port=...") from None
    return sock


def _serve(plan: ClusterPlan, mine: dict) -> tuple[dict[int, LineSocket], ClusterPlan]:
    deadline = time.monotonic() + plan.peer_timeout
    joined: dict = {}
    hellos: dict = {}
    told: set = set()
    with _Door(_listen(plan.port, plan.nnodes)) as door:
        try:
            _gather(door, plan, mine, joined, hellos, told, deadline)
            nodes = plan.nodes if plan.agreed else rendezvous.agree(plan, hellos)
        except UserError as e:
            _tell_everyone(door, plan, joined, told, deadline, {"ok": False, "error": str(e)})
            raise
    if plan.agreed:
        for link in joined.values():
            link.send({"ok": True})
        return joined, plan
    links = {nodes.index(address): link for address, link in joined.items()}
    for node, link in links.items():
        link.send({"ok": True, "nodes": list(nodes), "node": node})
    return links, dataclasses.replace(plan, nodes=nodes, agreed=True)


class _Door:
    """Node 0's listening socket and the connections that have not said hello yet, on one selector."""

    def __init__(self, server: socket.socket) -> None:
        self.server = server
        self.selector = selectors.DefaultSelector()
        server.setblocking(False)
        self.selector.register(server, selectors.EVENT_READ, None)
        self.pending: dict[LineSocket, float] = {}
        """Connections still to say hello -> when they must have; in arrival order, so the first is due first."""

    def __enter__(self) -> "_Door":
        return self

    def __exit__(self, *_) -> None:
        for link in self.pending:
            link.close()
        self.selector.close()
        self.server.close()

    def next(self, deadline: float) -> Optional[tuple[LineSocket, Optional[dict]]]:
        """The next connection to finish its first line, with that message (None if not one of ours, or
        nothing within _HELLO_S); None when the deadline passed."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            first = next(iter(self.pending.items()), None)
            if first is not None and first[1] <= now:
                return self._release(first[0]), None
            due = min(deadline, first[1]) if first else deadline
            for key, _ in self.selector.select(min(due - now, 1.0)):
                if key.data is None:
                    self._admit(now)
                    continue
                message, done = key.data.receive_one()
                if message is not None or done:
                    return self._release(key.data), message

    def _admit(self, now: float) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            link = LineSocket(conn)
            self.pending[link] = now + _HELLO_S
            self.selector.register(conn, selectors.EVENT_READ, link)

    def _release(self, link: LineSocket) -> LineSocket:
        del self.pending[link]
        self.selector.unregister(link.sock)
        return link


def _gather(door: _Door, plan: ClusterPlan, mine: dict, joined: dict, hellos: dict, told: set,
            deadline: float) -> None:
    while len(joined) < plan.nnodes - 1:
        got = door.next(deadline)
        if got is None and _enough(plan, joined):
            print(f"paddledist: continuing with {len(joined) + 1} of {plan.nnodes} machines (Train.nnodes="
                  f"{plan.min_nodes}:{plan.nnodes}; came within Train.peer_timeout={plan.peer_timeout}s: "
                  f"{', '.join([plan.host, *sorted(joined)])})", flush=True)
            return
        if got is None:
            raise UserError(_missing_message(plan, joined))
        link, theirs = got
        if theirs is None:  # not one of ours (a port scan, a stray client): ignore it
            link.close()
            continue
        problem = mismatch(mine, theirs) or _duplicate(theirs, joined, plan)
        if problem:
            _answer(link, {"ok": False, "error": problem})
            told.add(str(rendezvous.who_key(plan, theirs)))
            raise UserError(problem)
        joined[rendezvous.who_key(plan, theirs)] = link
        hellos[rendezvous.who_key(plan, theirs)] = {"rank": theirs.get("rank")}  # all agree() reads: a whole
        # hello holds the machine list, and a thousand of them kept until everyone came would be O(nodes^2)


def _tell_everyone(door: _Door, plan: ClusterPlan, joined: dict, told: set, deadline: float,
                   verdict: dict) -> None:
    """Answer every node that came with the verdict; keep answering late ones until all were told or the
    deadline passes, so that no node waits out its timeout without knowing why."""
    told.update(map(str, joined))
    for link in joined.values():
        _answer(link, verdict)
    while not _all_told(plan, told):
        got = door.next(deadline)
        if got is None:
            return
        link, theirs = got
        if theirs is not None:
            told.add(str(rendezvous.who_key(plan, theirs)))
            _answer(link, verdict)
        link.close()


def _all_told(plan: ClusterPlan, told: set) -> bool:
    if not plan.agreed:  # nodes are known by address only: count them
        return len(told) >= plan.nnodes - 1
    return set(map(str, range(1, plan.nnodes))) <= told


def _answer(link: LineSocket, message: dict) -> None:
    try:
        link.send(message)
    except OSError:
        pass
    finally:
        link.close()


def _duplicate(theirs: dict, joined: dict, plan: ClusterPlan) -> Optional[str]:
    node = rendezvous.who_key(plan, theirs)
    if not plan.agreed and (node in joined or node == plan.host):
        return (f"two machines say they are {node}; give each machine its own address (POD_IP or "
                "Train.node_ip)")
    if node in joined:
        return (f"two machines claim to be node {node} ({plan.nodes[node]}); give each machine its own "
                "address in Train.dist_ips (or its own Train.node_ip)")
    return None


def _enough(plan: ClusterPlan, joined: dict) -> bool:
    """Train.nnodes MIN:MAX: at least MIN machines (node 0 included) came, so node 0 continues with those."""
    return not plan.agreed and plan.min_nodes > 0 and len(joined) + 1 >= plan.min_nodes


def _missing_message(plan: ClusterPlan, joined: dict) -> str:
    if not plan.agreed:
        came = f" (came: {', '.join(sorted(joined))})" if joined else ""
        fewest = (f"only {len(joined) + 1} of {plan.nnodes} machines came and Train.nnodes={plan.min_nodes}:"
                  f"{plan.nnodes} needs at least {plan.min_nodes}: " if plan.min_nodes else "")
        return (f"{fewest}{plan.nnodes - 1 - len(joined)} of {plan.nnodes - 1} other machine(s) did not join within "
                f"Train.peer_timeout={plan.peer_timeout}s{came}: start the same command there, and check they "
                f"can reach {plan.nodes[0]}:{plan.port} over TCP")
    missing = [f"node {i} ({plan.nodes[i]})" for i in range(1, plan.nnodes) if i not in joined]
    return (f"{', '.join(missing)} did not join within Train.peer_timeout={plan.peer_timeout}s: start the same "
            f"command there, and check they can reach {plan.nodes[0]}:{plan.port} over TCP")


def _join(plan: ClusterPlan, mine: dict) -> tuple[LineSocket, ClusterPlan]:
    link = LineSocket(_connect(plan, time.monotonic() + plan.peer_timeout))
    try:
        link.send(mine)
    except OSError as e:
        link.close()
        raise UserError(f"node 0 ({plan.nodes[0]}) dropped the preflight connection ({e.strerror})") from None
    reply = link.read(timeout=plan.peer_timeout + _REPLY_GRACE_S)
    if reply is None or not reply.get("ok"):
        link.close()
    if reply is None:
        raise UserError(f"node 0 ({plan.nodes[0]}) gave no preflight answer within Train.peer_timeout="
                        f"{plan.peer_timeout}s; look at its output")
    if not reply.get("ok"):
        raise UserError(f"node 0 ({plan.nodes[0]}) reports: {reply.get('error')}")
    try:
        return link, rendezvous.placed(plan, reply)
    except UserError:
        link.close()
        raise


def _connect(plan: ClusterPlan, deadline: float) -> socket.socket:
    master = (plan.nodes[0], plan.port)
    while True:
        remaining = deadline - time.monotonic()
        try:
            return socket.create_connection(master, timeout=max(min(remaining, 2.0), 0.1))
        except OSError as e:
            if remaining <= 0:
                raise UserError(f"node 0 ({plan.nodes[0]}) did not answer on port {plan.port} within "
                                f"Train.peer_timeout={plan.peer_timeout}s ({_reason(e)}): start the same command "
                                "there, and check that TCP port is open between the machines") from None
            time.sleep(min(0.5, max(remaining, 0)))


def _reason(e: OSError) -> str:
    if isinstance(e, socket.timeout) or e.errno in (errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route or no answer: a firewall or wrong address?"
    return e.strerror or str(e)

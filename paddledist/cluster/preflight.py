"""Preflight: before anything trains, every machine meets the first one on Train.port, bounded in time.

Node 0 listens on Train.port; every other node connects (retrying) and says who it is. When all have
joined with the same job, node list and device layout, node 0 answers "ok" to each and everyone launches.
Otherwise every node fails with one line naming the missing or mismatched node(s), instead of paddle's
launcher blocking forever. Plain TCP and JSON lines; no paddle import.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from typing import Optional

from paddledist.cluster.plan import ClusterPlan
from paddledist.errors import UserError

_REPLY_GRACE_S = 10.0
"""A joining node waits this much beyond its own timeout, so node 0's verdict (with names) reaches it."""


def preflight(plan: ClusterPlan) -> None:
    """Return when every machine is present and agrees; raise UserError naming what is wrong."""
    if plan.nnodes < 2:
        return
    if plan.node_rank == 0:
        _check_store_port_free(plan)
        _serve(plan)
    else:
        _join(plan)


def hello(plan: ClusterPlan) -> dict:
    """What a node says about itself; node 0 compares it with its own view."""
    return {"job": plan.job_id, "nodes": list(plan.nodes), "node": plan.node_rank,
            "kind": plan.device.kind, "nproc": plan.nproc_per_node}


def mismatch(mine: dict, theirs: dict) -> Optional[str]:
    """Why a joining node cannot be part of this job, or None."""
    who = f"node {theirs.get('node')} ({_address(mine, theirs.get('node'))})"
    for key, what in (("job", "Train.job_id"), ("nodes", "Train.dist_ips"), ("kind", "Global.device kind"),
                      ("nproc", "number of processes per machine (Global.device ids)")):
        if theirs.get(key) != mine.get(key):
            return (f"{who} has {what} {_show(theirs.get(key))}, node 0 has {_show(mine.get(key))}; "
                    "run the same config on every machine")
    if not isinstance(theirs.get("node"), int) or not 0 < theirs["node"] < len(mine["nodes"]):
        return f"a peer claims to be node {theirs.get('node')!r}, which is not a joining node"
    return None


def _show(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _address(mine: dict, node: object) -> str:
    nodes = mine["nodes"]
    return nodes[node] if isinstance(node, int) and 0 <= node < len(nodes) else "?"


def _check_store_port_free(plan: ClusterPlan) -> None:
    """Rank 0 serves paddle's TCP store on Train.port + 1 (the launcher's --start_port) on node 0."""
    port = plan.port + 1
    try:
        with _bound(port):
            pass
    except OSError as e:
        raise UserError(f"port {port} (Train.port + 1) on node 0 ({plan.host}) is unusable ({e.strerror}); another "
                        "job may be running: stop it or choose another -o Train.port=...") from None


def _bound(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        raise
    return sock


def _serve(plan: ClusterPlan) -> None:
    deadline = time.monotonic() + plan.peer_timeout
    try:
        server = _bound(plan.port)
    except OSError as e:
        raise UserError(f"node 0 cannot listen on Train.port {plan.port} ({e.strerror}); another job may be "
                        "running: stop it or choose another -o Train.port=...") from None
    joined: dict[int, socket.socket] = {}
    with server:
        server.listen(64)
        try:
            _gather(server, plan, joined, deadline)
        except UserError as e:
            _answer(joined, {"ok": False, "error": str(e)})
            raise
        _answer(joined, {"ok": True})


def _gather(server: socket.socket, plan: ClusterPlan, joined: dict, deadline: float) -> None:
    mine = hello(plan)
    while len(joined) < plan.nnodes - 1:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UserError(_missing_message(plan, joined))
        server.settimeout(min(remaining, 1.0))
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        theirs = _read_json(conn, timeout=5.0)
        if theirs is None:  # not one of ours (a port scan, a stray client): ignore it
            conn.close()
            continue
        problem = mismatch(mine, theirs) or _duplicate(theirs, joined, plan)
        if problem:
            _answer({-1: conn}, {"ok": False, "error": problem})
            raise UserError(problem)
        joined[theirs["node"]] = conn


def _duplicate(theirs: dict, joined: dict, plan: ClusterPlan) -> Optional[str]:
    node = theirs["node"]
    if node in joined:
        return (f"two machines claim to be node {node} ({plan.nodes[node]}); give each machine its own "
                "address in Train.dist_ips (or its own Train.node_ip)")
    return None


def _missing_message(plan: ClusterPlan, joined: dict) -> str:
    missing = [f"node {i} ({plan.nodes[i]})" for i in range(1, plan.nnodes) if i not in joined]
    return (f"{', '.join(missing)} did not join within Train.peer_timeout={plan.peer_timeout}s: start the same "
            f"command there, and check they can reach {plan.nodes[0]}:{plan.port} over TCP")


def _answer(conns: dict, message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    for conn in conns.values():
        try:
            conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()


def _join(plan: ClusterPlan) -> None:
    conn = _connect(plan, time.monotonic() + plan.peer_timeout)
    with conn:
        try:
            conn.sendall((json.dumps(hello(plan)) + "\n").encode())
        except OSError as e:
            raise UserError(f"node 0 ({plan.nodes[0]}) dropped the preflight connection ({e.strerror})") from None
        reply = _read_json(conn, timeout=plan.peer_timeout + _REPLY_GRACE_S)
    if reply is None:
        raise UserError(f"node 0 ({plan.nodes[0]}) gave no preflight answer within Train.peer_timeout="
                        f"{plan.peer_timeout}s; look at its output")
    if not reply.get("ok"):
        raise UserError(f"node 0 ({plan.nodes[0]}) reports: {reply.get('error')}")


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


def _read_json(conn: socket.socket, timeout: float) -> Optional[dict]:
    conn.settimeout(timeout)
    try:
        line = conn.makefile("rb").readline(65536)
        message = json.loads(line.decode())
    except (OSError, ValueError):
        return None
    return message if isinstance(message, dict) else None

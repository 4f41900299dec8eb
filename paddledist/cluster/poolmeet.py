"""Where a Train.dist_ips pool (cluster/pool.py) meets between launches, on Train.port, before the preflight.

- While a pool's launch runs, its hub keeps a lobby on Train.port (free then: the preflight has closed it, and
  paddle's launcher uses the ports above it). The lobby greets every connection with {"pool": job, "nodes":
  the whole list} and keeps it; that is all it does while the job runs.
- A machine of the list starting (its command run again after it was lost) first probes the other listed
  machines' Train.port in list order, silently: a preflight says nothing first (and drops a silent connection
  after a few seconds, harmlessly), only a lobby greets. Greeted by a running pool of the same job and list, it
  says {"join": its address} and waits there for the next restart (the pool's next fault), up to
  Train.peer_timeout; otherwise it starts as listed.
- At a restart the hub (the first live machine of its view) takes the survivors of its view and the machines
  waiting in its lobby, up to the list, in list order, and answers each {"nodes": [...]}; every other survivor
  asks the hub for that list. Then everyone runs the ordinary preflight on the agreed list.
JSON lines (wire.LineSocket), guarded as the preflight's door is (cluster/auth.py): a join is taken only from
the address it names, and with a job secret only sealed with it (the lobby's greeting carries a nonce, and the
answer is sealed too); a refused one is named in one line. No paddle. A connection that greets and then says
nothing costs the hub's meeting up to _LINE_S.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from typing import Optional

from paddledist.cluster import auth
from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.pool import placed_on
from paddledist.cluster.wire import LineSocket, connect_from
from paddledist.errors import UserError

GREETING_S = 2.0
"""How long a probe waits for a lobby's greeting (a preflight or nothing listening says nothing)."""
_LINE_S = 5.0
"""How long the hub waits for a greeted connection's {"join": ...} line."""


class Lobby:
    """The hub's door on Train.port while a pool's launch runs, and the meeting at its restart."""

    def __init__(self) -> None:
        self.server: Optional[socket.socket] = None
        self.held: list[LineSocket] = []
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "Lobby":
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def open(self, plan: ClusterPlan) -> None:
        """Listen on Train.port and greet in a thread (a note, and no lobby, when the port cannot be had)."""
        if self.server is not None:
            return
        try:
            self.server = _listen(plan.port)
        except OSError as e:
            print(f"paddledist: no pool lobby on Train.port {plan.port} ({e.strerror}): a returning machine is "
                  "taken in at a later restart", flush=True)
            return
        pool = {"pool": plan.job_id, "nodes": list(plan.pool)}
        self._thread = threading.Thread(target=self._serve, args=(self.server, pool, plan.secret), daemon=True,
                                        name="paddledist-pool-lobby")
        self._thread.start()

    def _serve(self, server: socket.socket, pool: dict, secret: Optional[bytes]) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            except OSError:  # closed by close()
                return
            link = LineSocket(conn)
            nonce, greeting = auth.greeting(secret)
            try:
                link.send({**greeting, **pool})
            except OSError:
                link.close()
                continue
            with self._lock:
                self.held.append((link, nonce))

    def arrived(self) -> list[tuple[LineSocket, str]]:
        """The connections greeted since the last call, with the nonce each was greeted with."""
        with self._lock:
            held, self.held = self.held, []
        return held

    def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            try:
                server.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept() at once
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if server is not None:
            server.close()
        for link, _ in self.arrived():
            link.close()


def meet(plan: ClusterPlan, lobby: Lobby, restarts: list = ()) -> ClusterPlan:
    """The hub at a restart: wait (up to Train.peer_timeout) for the other survivors of its view; take them and
    the listed machines waiting in its lobby, in list order, and tell each the list and the job's `restarts` so
    far (a returning machine may be rank 0 next, whose results list them). Raises UserError below MIN."""
    lobby.open(plan)
    expected = set(plan.nodes) - {plan.host}
    came: dict[str, LineSocket] = {}
    deadline = time.monotonic() + plan.peer_timeout
    while not expected <= set(came) and time.monotonic() < deadline:
        for link, nonce in lobby.arrived():
            _file(plan, link, nonce, came)
        time.sleep(0.1)
    lobby.close()
    came = {address: link for address, link in came.items() if address in expected or _alive(link)}
    nodes = tuple(a for a in plan.pool if a == plan.host or a in came)
    verdict = ({"nodes": list(nodes), "restarts": list(restarts)} if len(nodes) >= plan.min_nodes else
               {"error": f"only {len(nodes)} listed machine(s) met at the restart ({', '.join(nodes)}), fewer than "
                         f"Train.nnodes MIN={plan.min_nodes}"})
    for link in came.values():
        try:
            link.send(verdict)
        except OSError:
            pass
        link.close()
    if "error" in verdict:
        raise UserError(f"{verdict['error']} on the hub {plan.host}:{plan.port}")
    return placed_on(plan, nodes)


def _file(plan: ClusterPlan, link: LineSocket, nonce: str, came: dict) -> None:
    """Read a greeted connection's {"join": address, "job": ...}; keep it when it is a listed machine of this job
    that comes from that address (and, with a job secret, sealed its join with it)."""
    first = link.read(timeout=_LINE_S)
    said, seal, why = auth.admit(first, nonce, plan.secret) if first is not None else (None, None, "")
    address = said.get("join") if isinstance(said, dict) else None
    if said is not None and not why and address in plan.pool:
        why = auth.source_problem(address, address, address, _peer(link)) or ""
    if why:
        print(f"paddledist: the pool's hub rejected a connection from {_peer(link)}: {why}", file=sys.stderr,
              flush=True)
    if why or said is None or said.get("job") != plan.job_id or address not in plan.pool or address == plan.host:
        link.close()
        return
    link.seal = seal
    if address in came:
        came[address].close()
    came[address] = link


def _alive(link: LineSocket) -> bool:
    """A machine that waited in the lobby is still there (its connection not closed by its end)."""
    try:
        link.sock.setblocking(False)  # a socket timeout would make recv wait for data first
        return link.sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def ask(plan: ClusterPlan) -> ClusterPlan:
    """A survivor that is not the hub, at a restart: the next list from the hub (plan.nodes[0])."""
    hub = plan.nodes[0]
    deadline = time.monotonic() + plan.peer_timeout
    while True:
        greeted = _greeted(hub, plan)
        if greeted is not None:
            return _wait_for_list(plan, greeted, plan.peer_timeout + _LINE_S, f"the pool's hub {hub}")[0]
        if time.monotonic() >= deadline:
            raise UserError(f"the pool's hub {hub} did not meet this node on Train.port {plan.port} within "
                            f"Train.peer_timeout={plan.peer_timeout}s after the restart; look at its output")
        time.sleep(0.5)


def rejoin(plan: ClusterPlan) -> tuple[ClusterPlan, list]:
    """A listed machine starting: when another listed machine's Train.port greets as a running pool of this job
    (this machine was lost and its command is run again), wait there to be taken in at its next restart, up to
    Train.peer_timeout: the plan then, and the job's restarts so far; otherwise (every machine starting
    together) the plan as listed and no restarts."""
    for address in plan.pool:
        greeted = None if address == plan.host else _greeted(address, plan)
        if greeted is not None:
            print(f"paddledist: the pool of Train.dist_ips runs with {address} as its hub: this node waits there to "
                  f"be taken in at its next restart (up to Train.peer_timeout={plan.peer_timeout}s)", flush=True)
            return _wait_for_list(plan, greeted, plan.peer_timeout, f"the running pool's hub {address}")
    return plan, []


def _greeted(address: str, plan: ClusterPlan) -> Optional[tuple[LineSocket, dict]]:
    """A connection to `address`:Train.port (from this machine's own address) that greeted as a lobby of this
    job's pool, with the greeting; or None."""
    try:
        link = LineSocket(connect_from(plan.host, (address, plan.port), GREETING_S))
    except OSError:
        return None
    greeting = link.read(timeout=GREETING_S)
    if not greeting or greeting.get("pool") != plan.job_id or greeting.get("nodes") != list(plan.pool):
        link.close()
        return None
    return link, greeting


def _wait_for_list(plan: ClusterPlan, greeted: tuple[LineSocket, dict], wait_s: float,
                   hub: str) -> tuple[ClusterPlan, list]:
    link, greeting = greeted
    try:
        first, seal = _introduced(link, greeting, plan, hub)
        link.send(first)
        link.seal = seal
        reply = link.read(timeout=wait_s)
    except OSError:
        reply = None
    finally:
        link.close()
    if reply is None:
        raise UserError(f"{hub} gave no list of machines within {wait_s:g}s (Train.peer_timeout={plan.peer_timeout}s): "
                        "no restart came, or it ended; run this command again with the next restart in sight")
    nodes = reply.get("nodes")
    if not isinstance(nodes, list) or plan.host not in nodes or not set(nodes) <= set(plan.pool):
        raise UserError(f"{hub} reports: {reply.get('error') or f'a list without this node: {nodes}'}")
    restarts = reply.get("restarts") if isinstance(reply.get("restarts"), list) else []
    return placed_on(plan, tuple(nodes)), [r for r in restarts if isinstance(r, dict)]


def _introduced(link: LineSocket, greeting: dict, plan: ClusterPlan, hub: str):
    """(this machine's join, sealed with the job secret if any; the connection's seal)."""
    try:
        return auth.introduce(greeting, {"join": plan.host, "job": plan.job_id}, plan.secret, hub)
    except UserError:
        link.close()
        raise


def _peer(link: LineSocket) -> str:
    try:
        return str(link.sock.getpeername()[0])
    except OSError:
        return "an address that has gone"


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    sock.settimeout(0.5)
    return sock

"""Node 0's door on Train.port during the preflight: the listening socket and the connections that have not
said hello yet, on one selector (epoll on Linux, no descriptor limit), read in whatever order they arrive, so
a connection that says nothing delays nobody. Every new connection is greeted with a nonce (cluster/auth.py);
a hello that fails the job secret, or claims a node whose listed address it does not come from, is refused:
named in one line here, told to the peer, and the job goes on. Only hellos that pass come out of `next`.
"""

from __future__ import annotations

import selectors
import socket
import sys
import time
from typing import Optional

from paddledist.cluster import auth, rendezvous
from paddledist.cluster.hello import Hello
from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.wire import LineSocket, encode
from paddledist.errors import UserError

HELLO_S = 5.0
"""How long node 0 waits for a new connection to send anything (or more of its first line) before dropping it
as not one of ours. Counted from its latest bytes and checked on what has arrived, so hellos that wait in the
kernel while node 0 is busy with thousands of others are read, not dropped."""


def listen(port: int, nnodes: int) -> socket.socket:
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


class Door:
    """Node 0's listening socket and the connections still to say hello."""

    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan
        self.server = listen(plan.port, plan.nnodes)
        self.selector = selectors.DefaultSelector()
        self.server.setblocking(False)
        self.selector.register(self.server, selectors.EVENT_READ, None)
        self.pending: dict[LineSocket, tuple[float, str]] = {}
        """Connection -> (when it must have said hello, the nonce it was greeted with); in arrival order."""
        self.rejected: list[str] = []
        """One line per refused connection, as printed."""

    def __enter__(self) -> "Door":
        return self

    def __exit__(self, *_) -> None:
        for link in self.pending:
            link.close()
        self.selector.close()
        self.server.close()

    def next(self, deadline: float) -> Optional[tuple[LineSocket, Hello]]:
        """The next connection whose hello passed, with that hello; None when the deadline passed."""
        while True:
            got = self._first_line(deadline)
            if got is None:
                return None
            link, message, nonce = got
            hello = self._admitted(link, message, nonce) if message is not None else None
            if hello is not None:
                return link, hello
            link.close()

    def _first_line(self, deadline: float) -> Optional[tuple[LineSocket, Optional[dict], str]]:
        """The next connection to finish its first line (None as the message when it said nothing within
        HELLO_S or nothing of ours), or None at the deadline."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            first = next(iter(self.pending.items()), None)
            if first is not None and first[1][0] <= now:
                link = first[0]
                got = self._receive(link, now)  # what arrived while this node was busy counts
                if got is not None:
                    return got
                if self.pending[link][0] <= now:  # silent for HELLO_S
                    return link, None, self._release(link)
                continue
            due = min(deadline, first[1][0]) if first else deadline
            for key, _ in self.selector.select(min(due - now, 1.0)):
                if key.data is None:
                    self._accept(now)
                    continue
                got = self._receive(key.data, now)
                if got is not None:
                    return got

    def _receive(self, link: LineSocket, now: float) -> Optional[tuple[LineSocket, Optional[dict], str]]:
        """Read what `link` has sent: its first line once complete (None as the message when it is not one of
        ours), else None; a connection still sending its hello gets HELLO_S more from its latest bytes."""
        before = link.buffered
        message, done = link.receive_one()
        if message is not None or done:
            return link, message, self._release(link)
        if link.buffered > before:
            self.pending[link] = (now + HELLO_S, self.pending.pop(link)[1])  # to the back: arrival order kept
        return None

    def _admitted(self, link: LineSocket, message: dict, nonce: str) -> Optional[Hello]:
        data, seal, why = auth.admit(message, nonce, self.plan.secret)
        hello = Hello.from_wire(data) if data is not None else None
        if not why and hello is None:
            why = "its hello is not this version's (run the same paddledist on every machine)"
        why = why or self._source_problem(link, hello)
        if why:
            self._refuse(link, why)
            return None
        link.seal = seal
        return hello

    def _source_problem(self, link: LineSocket, hello: Hello) -> Optional[str]:
        plan = self.plan
        if not plan.agreed:
            return auth.source_problem(hello.address, hello.address, hello.address, _peer(link))
        known = 0 < hello.node < plan.nnodes
        listed = plan.nodes[hello.node] if known else None
        name = plan.names[hello.node] if known and len(plan.names) == plan.nnodes else None
        problem = auth.source_problem(hello.node, listed, name, _peer(link))
        if problem and known and _resolves_here_to(plan, hello, _peer(link)):
            # the machine's name table maps its listed name to the address it came from: say which name
            return rendezvous.nodes_mismatch(plan.who(hello.node), Hello.of(plan), hello) or problem
        return problem

    def _refuse(self, link: LineSocket, why: str) -> None:
        line = f"paddledist: node 0 rejected a connection from {_peer(link)}: {why}"
        self.rejected.append(line)
        print(line, file=sys.stderr, flush=True)
        try:
            link.send({"ok": False, "error": f"rejected this connection: {why}"}, 1.0)
        except OSError:
            pass

    def _accept(self, now: float) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            nonce, greet = auth.greeting(self.plan.secret)
            try:
                conn.send(encode(greet))  # a few dozen bytes into a fresh socket's buffer: never blocks
            except OSError:
                conn.close()
                continue
            link = LineSocket(conn)
            self.pending[link] = (now + HELLO_S, nonce)
            self.selector.register(conn, selectors.EVENT_READ, link)

    def _release(self, link: LineSocket) -> str:
        _, nonce = self.pending.pop(link)
        self.selector.unregister(link.sock)
        return nonce


def _resolves_here_to(plan: ClusterPlan, hello: Hello, peer: str) -> bool:
    """Whether the joining node lists the same names, and its own under the address it came from."""
    return (bool(plan.names) and hello.names == tuple(plan.names) and len(hello.nodes) == plan.nnodes
            and hello.nodes[hello.node] == peer)


def _peer(link: LineSocket) -> str:
    try:
        return str(link.sock.getpeername()[0])
    except OSError:
        return "an address that has gone"

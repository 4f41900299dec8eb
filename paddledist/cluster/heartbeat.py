"""Heartbeats between the supervisors, over the connections the preflight opened (no extra port).

Node 0 (the hub) keeps one connection per other node; each other node keeps its one connection to node 0. The
messages are messages.py's. Every Train.heartbeat_interval seconds each side sends a Beat. The hub declares a
node Lost when its connection closes (its processes were killed: the kernel closes their sockets at once) or
nothing came for Train.heartbeat_timeout seconds, and tells every other node; a node that loses node 0 decides
the same on its own. A node whose own workers fail sends Stop and the hub relays it, so every node stops at
once instead of waiting for paddle's collectives to time out (a node whose ranks only failed because their
collectives broke says nothing: the cause is elsewhere). Done marks a node that finished cleanly (its closing
is no loss); a finished node waits for AllDone, which the hub sends once every node finished, so no node exits
0 while another one's ranks (rank 0 writing the last checkpoint) may still fail. A Preempt (a preemption
signal there) is relayed to every node, whose supervisor then asks its ranks to save and leave too.

The supervising runner polls `check()` and, on a verdict, ends its workers and exits non-zero naming the node.

Scale (benchmarks/control_plane.py, docs/benchmarks.md): the thread waits on a selector (epoll on Linux: no
descriptor limit, unlike select.select's 1024) and wakes for arrivals, a due beat, a wake-up from the runner's
calls, or every _MAX_WAIT_S; each wake costs O(what arrived), never O(nodes): beats go out once per interval,
only links with queued bytes are flushed, silence is judged at most every _TICK_S. A link's outgoing queue is
bounded (wire.LineSocket.queue) and written as the kernel takes it, so one slow peer never stalls the hub.
"""

from __future__ import annotations

import contextlib
import selectors
import threading
import time
from typing import Optional

from paddledist.cluster import messages as msg
from paddledist.cluster.messages import NodeState
from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.wire import LineSocket, Waker, close_gracefully, encode

_TICK_S = 0.1
"""How often silence is judged and waiting callers look again."""
_MAX_WAIT_S = 0.5
"""The longest the heartbeat thread sleeps with nothing to do (a bound on how late silence is noticed)."""


class Peers:
    """This node's heartbeat links: {node index: connection} (node 0: every other node; others: node 0)."""

    def __init__(self, plan: ClusterPlan, links: dict[int, LineSocket], interval_s: float, timeout_s: float,
                 clock=time.monotonic) -> None:
        self.plan, self.links = plan, dict(links)
        self.interval_s, self.timeout_s, self.clock = interval_s, timeout_s, clock
        self.me = plan.node_rank
        now = clock()
        self.last_seen = {k: now for k in self.links}
        self.state = {k: NodeState.LIVE for k in (self.me, *self.links)}
        """Each node's state as this node knows it, its own included (messages.NodeState)."""
        self.closed: set[int] = set()
        """Links whose connection closed or was given up: no longer read or written."""
        self._done_count = 0
        """Linked nodes in state DONE (counted: comparing sets per "done" was O(nodes^2) at the hub)."""
        self._told: set[str] = set()
        self._all_done = threading.Event()
        self.verdict: Optional[str] = None
        """The first reason to stop: a peer lost, or a peer's ranks failing on their own."""
        self.preempted: Optional[str] = None
        """Where and why a preemption was asked for (this node's or a peer's signal), None before."""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="paddledist-heartbeat", daemon=True)
        self._selector: Optional[selectors.BaseSelector] = None
        self._waker = Waker()
        """Wakes the sleeping heartbeat thread at once when the runner closes."""
        self._writing: set[int] = set()
        """Links with bytes the kernel has not taken yet: flushed when their socket is writable."""
        self._next_judge = 0.0

    @property
    def is_hub(self) -> bool:
        return self.me == 0

    # --- what the runner calls ----------------------------------------------------------------------

    def start(self) -> "Peers":
        self._selector = selectors.DefaultSelector()
        for k, link in self.links.items():
            link.sock.setblocking(False)
            self._selector.register(link.sock, selectors.EVENT_READ, k)
        self._selector.register(self._waker.receiving, selectors.EVENT_READ, None)
        self._thread.start()
        return self

    def check(self) -> Optional[str]:
        """Why this node must stop (a peer lost or stopped), or None."""
        return self.verdict

    def explain(self, wait_s: float) -> Optional[str]:
        """After this node's ranks failed: the peer to blame, or None. A verdict that came first is the cause;
        a peer silent for over two intervals is declared lost now (its silence broke the collectives here,
        before the heartbeat timeout); otherwise wait up to `wait_s` for the hub's word: a loss, or a node
        whose ranks failed on their own (only such nodes `tell`)."""
        with self._lock:
            if self.verdict:
                return self.verdict
            self._declare_silent(2 * self.interval_s, f"Train.heartbeat_interval={self.interval_s:g}s) when the "
                                 "collectives here failed")
        deadline = self.clock() + wait_s
        while self.verdict is None and self.clock() < deadline:
            time.sleep(_TICK_S)
        return self.verdict

    def tell(self, reason: str) -> None:
        """This node's ranks failed on their own (or stalled here): tell every node now (through the hub)."""
        with self._lock:
            self._told.add(reason)
            self._relay(msg.Stop(reason, self.me), skip=-1)

    def preempt(self, why: str) -> None:
        """A preemption signal here: tell every node (through the hub) to save at the next step and leave."""
        with self._lock:
            self.preempted = self.preempted or f"{self.plan.who(self.me)}: {why}"
            self._relay(msg.Preempt(why, self.me), skip=-1)

    def failed(self, reason: Optional[str]) -> None:
        """This node stopped: tell the others `reason` unless None (they know, or it follows from them); close."""
        if reason and reason not in self._told:  # the stall watchdog tells at once, before the job is ended
            self.tell(reason)
        self.close()

    def finish(self) -> Optional[str]:
        """This node finished cleanly: say so (its closing connection is no loss), then wait for the job's
        outcome while the heartbeats go on. None once every node finished; else why the job failed elsewhere."""
        with self._lock:
            self._relay(msg.Done(self.me), skip=-1)
            self.state[self.me] = NodeState.DONE
            self._check_all_done()
        while self.verdict is None and not self._all_done.is_set():
            time.sleep(_TICK_S)
        self.close()
        return self.verdict

    def close(self, drain_s: float = 1.0) -> None:
        """Send what is queued (up to `drain_s`), stop the heartbeat thread and close the connections (waiting
        up to `drain_s` more for the peers to close theirs, so that the last message is read)."""
        deadline = time.monotonic() + drain_s
        while self._thread.is_alive() and self._writing and time.monotonic() < deadline:
            time.sleep(0.02)
        self._closing.set()
        self._waker.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for link in self.links.values():
            link.flush()
        close_gracefully(list(self.links.values()), max(drain_s, 0.0))
        if self._selector is not None:
            self._selector.close()
        self._waker.close()

    # --- the heartbeat thread -----------------------------------------------------------------------

    def _loop(self) -> None:
        next_beat = 0.0
        while not self._closing.is_set():
            now = self.clock()
            if now >= next_beat:
                self._beat()
                next_beat = now + self.interval_s
            wait = min(next_beat - now, _MAX_WAIT_S)
            try:
                ready = self._selector.select(max(wait, 0.0))
            except (OSError, ValueError):  # close() gave up waiting for this thread and closed the selector
                return
            for key, events in ready:
                self._ready(key, events)
            if self.clock() >= self._next_judge:
                self._judge_silence()
                self._next_judge = self.clock() + _TICK_S

    def _beat(self) -> None:
        """One beat to every open link, encoded once (the hub's cost per interval is one send per node)."""
        with self._lock:
            self._relay(msg.Beat(self.me), skip=-1)

    def _open(self) -> list[int]:
        return [k for k in self.links if k not in self.closed]

    def _ready(self, key: selectors.SelectorKey, events: int) -> None:
        k = key.data
        if k is None:  # a wake-up from the runner's thread
            self._waker.drain()
            return
        if k in self.closed:  # a lost link's closing is no news: stop watching it
            with contextlib.suppress(KeyError, ValueError):  # close() outwaited this thread and closed it
                self._selector.unregister(key.fileobj)
            return
        if events & selectors.EVENT_WRITE:
            with self._lock:
                self._flush(k)
        if events & selectors.EVENT_READ:
            self._receive(k)

    def _receive(self, k: int) -> None:
        messages, closed = self.links[k].receive_ready()
        with self._lock:
            self.last_seen[k] = self.clock()
            for data in messages:
                message = msg.decode(data, k)
                if message is not None:
                    self._handle(k, message)
            if closed:
                self._lost(k, self.links[k].broken or "its connection closed (its processes ended or the machine "
                           "restarted)")

    def _handle(self, k: int, message: msg.Message) -> None:
        if isinstance(message, msg.Done):
            self._set_state(k, NodeState.DONE)
            self._check_all_done()
        elif isinstance(message, msg.AllDone) and not self.is_hub:
            self._all_done.set()
        elif isinstance(message, msg.Stop):
            self._set_state(k, NodeState.STOPPED)  # it (or the hub relaying) said why: its closing is no news
            self._decide(f"{self.plan.who(message.node)} stopped: {message.reason}")
            if self.is_hub:
                self._relay(message, skip=k)
        elif isinstance(message, msg.Preempt):
            self.preempted = self.preempted or f"{self.plan.who(message.node)}: {message.why}"
            if self.is_hub:
                self._relay(message, skip=k)
        elif isinstance(message, msg.Lost) and not self.is_hub:
            self._decide(f"{self.plan.who(message.node)} lost, reported by node 0: {message.why}")

    def _set_state(self, k: int, state: NodeState) -> None:
        if self.state[k] is not NodeState.DONE and state is NodeState.DONE:
            self._done_count += 1
        self.state[k] = state

    def _judge_silence(self) -> None:
        with self._lock:
            self._declare_silent(self.timeout_s, f"Train.heartbeat_timeout={self.timeout_s:g}s)")

    def _declare_silent(self, limit_s: float, setting: str) -> None:
        """Called with the lock held: every live node silent for over `limit_s` is lost."""
        now = self.clock()
        for k in self._open():
            silent = now - self.last_seen[k]
            if not self.state[k].finished and silent > limit_s:
                self._lost(k, f"no heartbeat for {silent:.0f}s ({setting}: its network link or machine is down")

    def _lost(self, k: int, why: str) -> None:
        """Called with the lock held. A finished node may close; anything else is a loss."""
        if k in self.closed:
            return
        self.closed.add(k)
        if self.state[k].finished:
            return
        self.state[k] = NodeState.LOST
        self._decide(f"{self.plan.who(k)} lost: {why}")
        if self.is_hub:
            self._relay(msg.Lost(k, why), skip=k)

    def _check_all_done(self) -> None:
        """Called with the lock held. The hub, once it and every other node finished, tells them all."""
        done_here = self.state[self.me] is NodeState.DONE
        if self.is_hub and done_here and self._done_count == len(self.links) and not self._all_done.is_set():
            self._relay(msg.AllDone(), skip=-1)
            self._all_done.set()

    def _relay(self, message: msg.Message, skip: int) -> None:
        """Called with the lock held: `message` to every open link but `skip`, encoded once (sealed per link),
        sent at once as far as each kernel buffer takes it; the rest waits for that socket to be writable."""
        data = msg.encode(message)
        line = encode(data)
        for j in self._open():
            if j != skip:
                link = self.links[j]
                link.queue_line(line) if link.seal is None else link.queue(data)
                self._flush(j)

    def _flush(self, k: int) -> None:
        """Called with the lock held: send what link k's kernel buffer takes; watch for writable while bytes
        remain (a slow reader costs its own queue, never the others' time)."""
        link = self.links[k]
        if not link.flush():
            self._lost(k, "its connection broke")
            return
        waiting = bool(link.out)
        if waiting == (k in self._writing) or self._selector is None or k in self.closed:
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if waiting else 0)
        try:
            self._selector.modify(link.sock, events, k)
        except (KeyError, ValueError, OSError):
            return
        (self._writing.add if waiting else self._writing.discard)(k)

    def _decide(self, verdict: str) -> None:
        if self.verdict is None:
            self.verdict = verdict


"""Heartbeats between the supervisors, over the connections the preflight opened (no extra port).

Node 0 (the hub) keeps one connection per other node; each other node keeps its one connection to node 0.
Every Train.heartbeat_interval seconds each side sends {"beat": node}. The hub declares a node lost when its
connection closes (its processes were killed: the kernel closes their sockets at once) or when nothing came
for Train.heartbeat_timeout seconds (its link or machine is down), and tells every other node
{"lost": node, "why": ...}. A node that loses node 0 decides the same on its own. A node whose own workers
fail sends {"stop": reason} and the hub relays it, so every node stops at once instead of waiting for paddle's
collectives to time out (a node whose ranks only failed because their collectives broke says nothing: the
cause is elsewhere). {"done": node} marks a node that finished cleanly: its closing is not a loss. A finished
node waits for the job's outcome before it exits: the hub says {"all_done": true} once every node finished,
so no node exits 0 while another one's ranks (rank 0 writing the last checkpoint) may still fail.
{"preempt": why, "node": node} (a preemption signal there) is relayed by the hub to every node, whose
supervisor then asks its own ranks to save and leave too (launch/stage.py).

The supervising runner polls `check()` and, on a verdict, ends its workers and exits non-zero naming the node.
"""

from __future__ import annotations

import select
import threading
import time
from typing import Optional

from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.wire import LineSocket

_TICK_S = 0.1


class Peers:
    """This node's heartbeat links: {node index: connection} (node 0: every other node; others: node 0)."""

    def __init__(self, plan: ClusterPlan, links: dict[int, LineSocket], interval_s: float, timeout_s: float,
                 clock=time.monotonic) -> None:
        self.plan, self.links = plan, dict(links)
        self.interval_s, self.timeout_s, self.clock = interval_s, timeout_s, clock
        self.me = plan.node_rank
        now = clock()
        self.last_seen = {k: now for k in self.links}
        self.finished: set[int] = set()
        """Nodes whose closing is no news: they finished, or said why they stopped."""
        self.completed: set[int] = set()
        """Nodes that finished cleanly (said "done")."""
        self._done_here = False
        self._told: set[str] = set()
        self._all_done = threading.Event()
        self.gone: set[int] = set()
        self.verdict: Optional[str] = None
        """The first reason to stop: a peer lost, or a peer's ranks failing on their own."""
        self.preempted: Optional[str] = None
        """Where and why a preemption was asked for (this node's or a peer's signal), None before."""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="paddledist-heartbeat", daemon=True)

    @property
    def is_hub(self) -> bool:
        return self.me == 0

    def who(self, node: int) -> str:
        address = self.plan.nodes[node] if 0 <= node < self.plan.nnodes else "?"
        return f"node {node} ({address})"

    # --- what the runner calls ----------------------------------------------------------------------

    def start(self) -> "Peers":
        for link in self.links.values():
            link.sock.setblocking(False)
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
            now = self.clock()
            for k in self._open():
                silent = now - self.last_seen[k]
                if k not in self.finished and silent > 2 * self.interval_s:
                    self._lost(k, f"no heartbeat for {silent:.0f}s (Train.heartbeat_interval={self.interval_s:g}s) "
                                  "when the collectives here failed: its network link or machine is down")
        deadline = self.clock() + wait_s
        while self.verdict is None and self.clock() < deadline:
            time.sleep(_TICK_S)
        return self.verdict

    def tell(self, reason: str) -> None:
        """This node's ranks failed on their own (or stalled here): tell every node now (through the hub)."""
        with self._lock:
            self._told.add(reason)
            for link in self.links.values():
                link.queue({"stop": reason, "node": self.me})
                link.flush()

    def preempt(self, why: str) -> None:
        """A preemption signal here: tell every node (through the hub) to save at the next step and leave."""
        with self._lock:
            self.preempted = self.preempted or f"{self.who(self.me)}: {why}"
            for link in self.links.values():
                link.queue({"preempt": why, "node": self.me})
                link.flush()

    def failed(self, reason: Optional[str]) -> None:
        """This node stopped: tell the others `reason` unless None (they know, or it follows from them); close."""
        if reason and reason not in self._told:  # the stall watchdog tells at once, before the job is ended
            self.tell(reason)
        self.close()

    def finish(self) -> Optional[str]:
        """This node finished cleanly: say so (its closing connection is no loss), then wait for the job's
        outcome while the heartbeats go on. None once every node finished; else why the job failed elsewhere."""
        with self._lock:
            for link in self.links.values():
                link.queue({"done": self.me})
            self._done_here = True
            self._check_all_done()
        while self.verdict is None and not self._all_done.is_set():
            time.sleep(_TICK_S)
        self.close()
        return self.verdict

    def close(self, drain_s: float = 1.0) -> None:
        """Send what is queued (up to `drain_s`), stop the heartbeat thread and close the connections."""
        deadline = time.monotonic() + drain_s
        while self._thread.is_alive() and any(l.out for l in self.links.values()) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for link in self.links.values():
            link.flush()
            link.close()

    # --- the heartbeat thread -----------------------------------------------------------------------

    def _loop(self) -> None:
        next_beat = 0.0
        while not self._closing.is_set():
            now = self.clock()
            with self._lock:
                if now >= next_beat:
                    for k in self._open():
                        self.links[k].queue({"beat": self.me})
                    next_beat = now + self.interval_s
                for k in self._open():
                    if not self.links[k].flush():
                        self._lost(k, "its connection broke")
            self._receive()
            self._judge_silence()

    def _open(self) -> list[int]:
        return [k for k in self.links if k not in self.gone]

    def _receive(self) -> None:
        open_links = {self.links[k].sock: k for k in self._open()}
        try:
            readable, _, _ = select.select(list(open_links), [], [], _TICK_S)
        except (OSError, ValueError):
            time.sleep(_TICK_S)
            return
        for sock in readable:
            k = open_links[sock]
            messages, closed = self.links[k].receive_ready()
            with self._lock:
                self.last_seen[k] = self.clock()
                for message in messages:
                    self._handle(k, message)
                if closed:
                    self._lost(k, "its connection closed (its processes ended or the machine restarted)")

    def _handle(self, k: int, message: dict) -> None:
        if "done" in message:
            self.finished.add(k)
            self.completed.add(k)
            self._check_all_done()
        elif "all_done" in message and not self.is_hub:
            self._all_done.set()
        elif "stop" in message:
            node = _sender(message, k)
            self.finished.add(k)  # it said why it goes: its closing connection is no further news
            self._decide(f"{self.who(node)} stopped: {message['stop']}")
            if self.is_hub:
                self._relay({"stop": message["stop"], "node": node}, skip=k)
        elif "preempt" in message:
            node = _sender(message, k)
            self.preempted = self.preempted or f"{self.who(node)}: {message['preempt']}"
            if self.is_hub:
                self._relay({"preempt": message["preempt"], "node": node}, skip=k)
        elif "lost" in message and not self.is_hub:
            node = message["lost"] if isinstance(message["lost"], int) else -1
            self._decide(f"{self.who(node)} lost, reported by node 0: {message.get('why')}")

    def _judge_silence(self) -> None:
        with self._lock:
            now = self.clock()
            for k in self._open():
                silent = now - self.last_seen[k]
                if k not in self.finished and silent > self.timeout_s:
                    self._lost(k, f"no heartbeat for {silent:.0f}s (Train.heartbeat_timeout={self.timeout_s:g}s): "
                                  "its network link or machine is down")

    def _lost(self, k: int, why: str) -> None:
        """Called with the lock held. A finished node may close; anything else is a loss."""
        if k in self.gone:
            return
        self.gone.add(k)
        if k in self.finished:
            return
        self._decide(f"{self.who(k)} lost: {why}")
        if self.is_hub:
            self._relay({"lost": k, "why": why}, skip=k)

    def _check_all_done(self) -> None:
        """Called with the lock held. The hub, once it and every other node finished, tells them all."""
        if self.is_hub and self._done_here and self.completed >= set(self.links) and not self._all_done.is_set():
            self._relay({"all_done": True}, skip=-1)
            self._all_done.set()

    def _relay(self, message: dict, skip: int) -> None:
        for j in self._open():
            if j != skip:
                self.links[j].queue(message)
                self.links[j].flush()

    def _decide(self, verdict: str) -> None:
        if self.verdict is None:
            self.verdict = verdict


def _sender(message: dict, k: int) -> int:
    """The node a relayed message is about: its "node" field, else the link it came on."""
    node = message.get("node", k)
    return node if isinstance(node, int) else k

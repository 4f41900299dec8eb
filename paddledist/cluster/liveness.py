"""Liveness and decisions in etcd for one launch: what the supervising runner asks of the other machines.

Each supervisor's lease (meeting.Lease, TTL Train.heartbeat_timeout) is renewed every Train.heartbeat_interval.
A machine is lost when its key goes (its lease expired or was revoked before it said done), seen by every survivor
through the watch; one verdict key, created by transaction, says why the job stops and which machines were lost, and
every machine reads that one. A supervisor that cannot renew its lease for Train.heartbeat_timeout is on the
minority side of a cut: it stops itself, and the others go on without it.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from paddledist.cluster.etcdlink import EtcdUnavailable, Store, etcd_errors
from paddledist.cluster.jobkeys import create, put
from paddledist.cluster.meeting import Met

_STALE_EVERY_S = 0.5
"""How often a supervisor whose ranks failed looks at the others' leases."""


class EtcdPeers:
    """The other machines of this launch, through etcd (the runner's PeerLinks)."""

    def __init__(self, store: Store, met: Met, clock=time.monotonic) -> None:
        self.store, self.met, self.plan, self.view = store, met, met.plan, met.view
        self.interval_s, self.timeout_s = met.plan.heartbeat_interval, met.plan.heartbeat_timeout
        self.clock = clock
        self.verdict: Optional[str] = None
        self.lost: tuple = ()
        """The addresses the verdict names as lost (typed, for the next generation's plan)."""
        self.preempted: Optional[str] = None
        self._told: set[str] = set()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="paddledist-liveness", daemon=True)

    def start(self) -> "EtcdPeers":
        self._thread.start()
        return self

    def check(self) -> Optional[str]:
        self._judge()
        return self.verdict

    def explain(self, wait_s: float) -> Optional[str]:
        """After this node's ranks failed: a machine that missed two renewals is lost now; else wait for word."""
        deadline = self.clock() + wait_s
        while self.check() is None:
            self._declare_stale(2 * self.interval_s + 1)
            if self.verdict is not None or self.clock() >= deadline:
                break
            time.sleep(_STALE_EVERY_S)
        return self.verdict

    def tell(self, reason: str) -> None:
        """This machine's ranks failed on their own: the others stop, naming it (this one knows its cause)."""
        self._told.add(reason)
        self._quietly(lambda: create(self.store, self.met.prefix + "verdict", {
            "reason": f"{self.plan.who()} stopped: {reason}", "lost": [], "by": self.plan.host, "told": True}))

    def preempt(self, why: str) -> None:
        self.preempted = self.preempted or f"{self.plan.who()}: {why}"
        self._quietly(lambda: create(self.store, self.met.prefix + "preempt", {"where": self.preempted}))

    def failed(self, reason: Optional[str]) -> None:
        if reason and reason not in self._told:
            self.tell(reason)
        self.close()

    def finish(self) -> Optional[str]:
        """Say done, then wait for every machine of the plan to be done (None) or for a verdict."""
        self._quietly(lambda: put(self.store, self.met.prefix + f"done/{self.plan.host}", {}))
        everyone = set(self.plan.nodes)
        while self.check() is None and not self.view.wait(lambda: everyone <= self.view.done, 0.5):
            pass
        self.close()
        return self.verdict

    def close(self) -> None:
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.view.close()
        self.met.lease.close()

    def _loop(self) -> None:
        lease = self.met.lease
        while not self._closing.wait(self.interval_s):
            if lease.expired:
                self._own_loss("its etcd lease expired before it was renewed")
            elif time.monotonic() - lease.renewed > self.timeout_s:
                self._unreachable()
            self._judge()

    def _unreachable(self) -> None:
        """No renewal for Train.heartbeat_timeout: the machine of the job's only member is lost (two machines, or
        master-address mode), else this one is cut off from the quorum."""
        hosts = [e.rsplit(":", 1)[0] for e in self.store.endpoints]
        if not self.plan.etcd and len(hosts) == 1 and hosts[0] in self.plan.nodes and hosts[0] != self.plan.host:
            k = self.plan.nodes.index(hosts[0])
            self.verdict = self.verdict or (f"{self.plan.who(k)} lost: the job's etcd there did not answer for over "
                                            f"Train.heartbeat_timeout={self.timeout_s:g}s")
            self.lost = self.lost or (hosts[0],)
            return
        self._own_loss(f"it could not reach the job's etcd {self.store.shown()} for over "
                       f"Train.heartbeat_timeout={self.timeout_s:g}s: the machines that still reach it go on")

    def _own_loss(self, why: str) -> None:
        self.verdict = self.verdict or f"{self.plan.who()} lost: {why}"
        self.lost = self.lost or (self.plan.host,)

    def _judge(self) -> None:
        """Adopt the recorded verdict; record a loss for a machine of the plan whose key went before it was done."""
        view = self.view
        with view._changed:
            recorded, gone, done, preempt = view.verdict, list(view.gone), set(view.done), view.preempt
        if preempt and not self.preempted:
            self.preempted = preempt.get("where", "another machine")
        if recorded:  # one verdict per launch; this machine's own told cause is no news to it
            own = recorded.get("told") is True and recorded.get("by") == self.plan.host
            if self.verdict is None and not own:
                self.verdict, self.lost = str(recorded.get("reason")), tuple(recorded.get("lost") or ())
            return
        lost = [a for a in gone if a in self.plan.nodes and a not in done and a != self.plan.host]
        if lost and self.verdict is None:
            k = self.plan.nodes.index(lost[0])
            self._record({"reason": f"{self.plan.who(k)} lost: its etcd lease ended (no renewal for "
                                    f"Train.heartbeat_timeout={self.timeout_s:g}s, or its supervisor stopped)",
                          "lost": lost, "by": self.plan.host})

    def _declare_stale(self, limit_s: float) -> None:
        """Machines whose lease has not been renewed for over `limit_s`: lost now."""
        for k, address in enumerate(self.plan.nodes):
            lease = self.view.leases.get(address)
            if address == self.plan.host or address in self.view.done or not lease:
                continue
            try:
                answer = self.store.call(lambda c, i=lease: c.post(c.get_url("/lease/timetolive"), json={"ID": i}))
            except EtcdUnavailable:
                return
            left, granted = int(answer.get("TTL", -1)), int(answer.get("grantedTTL", 0))
            if left <= 0 or granted - left > limit_s:
                silent = granted if left <= 0 else granted - left
                self._record({"reason": f"{self.plan.who(k)} lost: no lease renewal for {silent}s "
                                        f"(Train.heartbeat_interval={self.interval_s:g}s) when the collectives here "
                                        "failed", "lost": [address], "by": self.plan.host})
                return

    def _record(self, verdict: dict) -> None:
        """Create the launch's verdict (the first one wins) and adopt the one etcd holds."""
        self._quietly(lambda: create(self.store, self.met.prefix + "verdict", verdict))
        self.view.wait(lambda: self.view.verdict, 2.0)
        recorded = self.view.verdict or verdict
        if self.verdict is None:
            self.verdict, self.lost = str(recorded.get("reason")), tuple(recorded.get("lost") or ())

    def _quietly(self, call) -> None:
        try:
            call()
        except (EtcdUnavailable, etcd_errors()):
            pass  # this machine is cut off: its own renewal failing says so

"""A job's control plane on etcd across its launches: the etcd (the user's, or the job's own members), the
meeting of each generation, and the plan of the next launch after a loss.

The first launch of a run meets at the generation after the newest one in etcd; a restart meets at the next.
A pool (Train.dist_ips with Train.nnodes MIN:MAX) waits for the listed machines the last verdict did not name as
lost and re-forms with those present, in list order, once at least MIN are; a machine that finds its pool running
without it registers for the next generation and is taken in at the pool's next restart.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from paddledist.cluster import etcdserver, ports
from paddledist.cluster.etcdlink import Credentials, EtcdUnavailable, Store, etcd_errors
from paddledist.cluster.hello import Hello
from paddledist.cluster.jobkeys import GenerationView, read_prefix
from paddledist.cluster.liveness import EtcdPeers
from paddledist.cluster.meeting import current_generation, job_prefix, meet
from paddledist.cluster.plan import ClusterPlan
from paddledist.errors import UserError


class EtcdJob:
    """Context: the job's etcd is reachable (started here when this machine runs a member) until the run ends."""

    def __init__(self, plan: ClusterPlan, secret: Optional[bytes]) -> None:
        self.plan, self.secret = plan, secret
        self.server = None
        if plan.etcd:
            self.store = Store(plan.etcd, Credentials.from_env())
        else:
            self.server = etcdserver.EmbeddedEtcd(plan, secret)
            self.store = Store(etcdserver.endpoints(plan), etcdserver.credentials(secret, plan.job_id))
        self.generation = 0
        self.lost: tuple = ()
        self.previous: tuple = ()

    def __enter__(self) -> "EtcdJob":
        if self.server is not None:
            self.server.__enter__()
        try:
            self._connect()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.server is not None:
            if self.server.proc is not None:
                self._linger()
            self.server.__exit__()

    def _linger(self) -> None:
        """A member leaving waits (up to Train.heartbeat_timeout) for the other machines to leave its last
        generation, so they still read the plan or verdict from it (with two machines it is the only member)."""
        others = f"{job_prefix(self.plan.job_id)}g{self.generation}/node/"
        quick = Store(self.store.endpoints, self.store.creds, timeout_s=1.0)  # cut off: no quorum, leave now
        deadline = time.monotonic() + self.plan.heartbeat_timeout
        while time.monotonic() < deadline:
            try:
                _, found = read_prefix(quick, others)
            except (EtcdUnavailable, etcd_errors()):
                return
            if all(key.endswith("/" + self.plan.host) for key in found):
                return
            time.sleep(0.2)

    def where(self) -> str:
        return f"etcd {self.store.shown()}" if self.plan.etcd else f"the job's etcd {self.store.shown()}"

    def _connect(self) -> None:
        if self.server is not None and self.secret is not None and self.plan.host == etcdserver.members(self.plan)[0]:
            opener = Store(self.store.endpoints)
            etcdserver.secure(opener, self.plan, self.secret, self.plan.peer_timeout)
        self._reach()
        if self.server is not None:
            self.server.remember(self.store)
        self.generation = current_generation(self.store, self.plan.job_id)

    def _reach(self) -> None:
        """Wait up to Train.peer_timeout for the etcd to answer this machine; one line (exit 2) if it does not."""
        what = (f"the etcd {self.store.shown()} (Train.dist_master) is unreachable" if self.plan.etcd
                else f"the job's etcd {self.store.shown()} did not answer this machine")
        self.store.wait_ready(self.plan.peer_timeout, what, f"{job_prefix(self.plan.job_id)}gen")

    def meet(self, plan: ClusterPlan, facts: Optional[dict], restarts: Optional[list] = None) -> EtcdPeers:
        """Meet the others at the next generation; a machine left out waits for the one after. `restarts`: the
        job's so far here; the others' longer list (this machine taken into a running pool) is adopted into it."""
        hello = dataclasses.replace(Hello.of(plan, facts), restarts=tuple(restarts or ()))
        try:
            peers = self._meet(plan, hello)
        except EtcdUnavailable as e:
            raise UserError(f"{self.where()} became unreachable from this machine while meeting ({e}); the "
                            "machines that reach it go on") from None
        with peers.view._changed:
            known = [list(h.get("restarts") or []) for h in peers.view.hellos.values()]
        if restarts is not None and max(map(len, known), default=0) > len(restarts):
            restarts[:] = max(known, key=len)
        if plan.pool:
            print(f"paddledist: the pool meets on {peers.plan.nnodes} machine(s) {','.join(peers.plan.nodes)}: "
                  f"this node is node {peers.plan.node_rank}", flush=True)
        return peers

    def _meet(self, plan: ClusterPlan, hello: Hello) -> EtcdPeers:
        self._reach()
        self._wait_while_running(plan)
        while True:
            if self.server is not None:
                self.server.check_alive()
            self.generation += 1
            busy = ports.in_use(*plan.launcher_port, f"node 0 ({plan.host})") or ""
            met = meet(self.store, plan, dataclasses.replace(hello, busy=busy), self.generation,
                       self._expected(plan))
            if met is not None:
                return EtcdPeers(self.store, met)
            print(f"paddledist: generation {self.generation} formed without this machine; it joins the next "
                  "restart", flush=True)
            self._wait_while_running(plan)

    def note_end(self, peers: Optional[EtcdPeers]) -> None:
        """What the ended launch's verdict says was lost (the next plan waits for the others only)."""
        self.lost = tuple(peers.lost) if peers is not None else ()
        self.previous = tuple(peers.plan.nodes) if peers is not None else ()

    def next_plan(self, plan: ClusterPlan) -> tuple[Optional[ClusterPlan], str]:
        """The listed plan again (the meeting places this machine), or None when a pool lost its quorum."""
        if not plan.pool:
            return plan, ""
        left = [a for a in plan.pool if a not in self.lost]
        if len(left) < plan.min_nodes:
            return None, (f"{len(left)} of the listed machines left after losing {', '.join(self.lost)}, fewer than "
                          f"Train.nnodes MIN={plan.min_nodes} (a quorum of the list): not restarting")
        line = f"re-forming without {', '.join(self.lost)}" if self.lost else ""
        return plan, line

    def _expected(self, plan: ClusterPlan) -> tuple:
        """Whom the next meeting waits for: a fixed list, all of it (a lost machine is waited for, as without
        etcd); a pool's list, or with Train.nnodes MIN:MAX the last launch's machines, without the ones the last
        verdict named as lost; a fixed count (): Train.nnodes machines."""
        if plan.agreed and not plan.pool:
            return plan.nodes
        listed = plan.pool if plan.agreed else (self.previous if plan.min_nodes else ())
        return tuple(a for a in listed if a not in self.lost)

    def _wait_while_running(self, plan: ClusterPlan) -> None:
        """A pool running a generation without this machine: wait until that launch ends."""
        if not plan.pool or not self.generation:
            return
        view = GenerationView(self.store, f"{job_prefix(plan.job_id)}g{self.generation}/").start()
        try:
            everyone = set(view.plan["nodes"]) if view.plan else set()
            if view.plan and plan.host not in everyone and not (view.verdict or everyone <= view.done):
                print(f"paddledist: the pool runs generation {self.generation} on {','.join(view.plan['nodes'])}; "
                      "this machine waits to be taken in at its next restart", flush=True)
                while not view.wait(lambda: view.verdict or everyone <= view.done, 60.0):
                    pass
                if everyone <= view.done and not view.verdict:
                    raise UserError(f"the pool finished generation {self.generation} without this machine")
        finally:
            view.close()

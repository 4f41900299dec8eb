"""The machines meet in etcd: each registers its hello under its lease, one plan is created by transaction, every
machine checks that all of the plan's agree with its first.

A generation is one launch. Machines listed in Train.dist_ips meet in list order (the first present is node 0); with
an etcd of the user's own (Train.dist_master=etcd://...) the plan orders them by the platform's rank, else by
address; in master-address mode (Train.dist_master=host:port) the master's machine first. With Train.nnodes MIN:MAX
the plan is made once MAX came, or after Train.peer_timeout with at least MIN. A machine that registers after the
plan was made is not in it and waits for the next generation.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import threading
import time
from dataclasses import dataclass
from typing import Optional

from paddledist.cluster.etcdlink import EtcdUnavailable, Store, etcd_errors
from paddledist.cluster.hello import Hello, mismatch
from paddledist.cluster.jobkeys import GenerationView, create, put, read_prefix
from paddledist.cluster.plan import ClusterPlan
from paddledist.errors import UserError


@dataclass
class Met:
    """This machine's place in a generation: the agreed plan, the view that follows it, its lease."""

    plan: ClusterPlan
    view: GenerationView
    lease: "Lease"
    generation: int
    prefix: str


class Lease:
    """This machine's lease, renewed every `interval_s` from the moment it is granted (a slow meeting never
    lets it lapse); `renewed` is when etcd last answered, `expired` whether etcd said it had ended."""

    def __init__(self, store: Store, ttl_s: int, interval_s: float) -> None:
        answer = store.call(lambda c: c.post(c.get_url("/lease/grant"), json={"TTL": ttl_s, "ID": 0}))
        self.store, self.id, self.interval_s = store, int(answer["ID"]), interval_s
        self.renewed, self.expired = time.monotonic(), False
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="paddledist-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        body = {"ID": self.id}
        while not self._closing.wait(self.interval_s):
            try:
                answer = self.store.call(lambda c: c.post(c.get_url("/lease/keepalive"), json=body))
            except (EtcdUnavailable, etcd_errors()):  # unreachable, or a member cut off from its quorum
                continue
            if int(answer.get("result", {}).get("TTL", 0)) <= 0:
                self.expired = True
                return
            self.renewed = time.monotonic()

    def close(self) -> None:
        """Stop renewing and revoke (best effort: it expires on its own)."""
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            self.store.call(lambda c: c.post(c.get_url("/lease/revoke"), json={"ID": self.id}))
        except Exception:  # noqa: BLE001 - best effort: it expires on its own
            pass


def job_prefix(job_id: str) -> str:
    return f"/paddledist/{job_id}/"


def current_generation(store: Store, job_id: str) -> int:
    """The newest generation that made a plan (0 before any)."""
    _, found = read_prefix(store, job_prefix(job_id) + "gen")
    value = next(iter(found.values()), {}).get("value")
    return value.get("generation", 0) if isinstance(value, dict) else 0


def meet(store: Store, plan: ClusterPlan, hello: Hello, generation: int, expected: tuple = ()) -> Optional[Met]:
    """Register for `generation` and wait for its plan; None when it was made without this machine.
    `expected`: the listed addresses to wait for (default: every listed one). UserError names what is wrong."""
    prefix = f"{job_prefix(plan.job_id)}g{generation}/"
    lease = Lease(store, max(2, round(plan.heartbeat_timeout)), plan.heartbeat_interval)
    view = GenerationView(store, prefix).start()
    try:
        _register(store, prefix + f"node/{hello.address}", hello, lease, plan.heartbeat_timeout + 1)
        listed = (plan.pool or plan.nodes) if plan.agreed else ()
        decided = _await_plan(store, view, plan, prefix, expected or listed, generation)
        if hello.address not in decided:
            view.close()
            return None
        if plan.min_nodes and len(decided) < plan.nnodes:
            print(f"paddledist: continuing with {len(decided)} of {plan.nnodes} machines (Train.nnodes="
                  f"{plan.min_nodes}:{plan.nnodes}; Train.peer_timeout={plan.peer_timeout}s)", flush=True)
        placed = _placed(plan, decided)
        _check_agreement(view, placed)
        return Met(placed, view, lease, generation, prefix)
    except BaseException:
        view.close()
        lease.close()
        raise


def _register(store: Store, key: str, hello: Hello, lease: Lease, wait_s: float) -> None:
    """This machine's hello under its lease; another machine's key for the same address (one left by a supervisor
    that stopped a moment ago lapses with its lease) still there after `wait_s` is a machine claiming it."""
    deadline = time.monotonic() + wait_s
    while not create(store, key, hello.to_wire(), lease.id):
        if time.monotonic() >= deadline:
            raise UserError(f"two machines say they are {hello.address}: give each machine its own address (or "
                            "Train.node_ip), and run one supervisor per machine")
        time.sleep(0.2)


def _await_plan(store: Store, view: GenerationView, plan: ClusterPlan, prefix: str, expected: tuple,
                generation: int) -> tuple:
    deadline = time.monotonic() + plan.peer_timeout
    while True:
        full = view.wait(lambda: view.plan or _complete(view, plan, expected), max(0.0, deadline - time.monotonic()))
        if view.plan:
            return tuple(view.plan["nodes"])
        late = time.monotonic() >= deadline
        if full or (late and plan.min_nodes and len(view.nodes) >= plan.min_nodes):
            _decide(store, view, plan, prefix, generation)
            view.wait(lambda: view.plan, 5.0)
        elif late:
            raise UserError(_missing(view, plan, expected, store))


def _complete(view: GenerationView, plan: ClusterPlan, expected: tuple) -> bool:
    if plan.agreed:
        return all(address in view.nodes for address in expected)
    again = (bool(plan.min_nodes and expected) and all(a in view.nodes for a in expected)
             and len(view.nodes) >= plan.min_nodes)
    return again or len(view.nodes) >= plan.nnodes


def _decide(store: Store, view: GenerationView, plan: ClusterPlan, prefix: str, generation: int) -> None:
    """Create the generation's plan from who is there (the first writer's plan is everyone's)."""
    with view._changed:
        present = dict(view.nodes)
    if plan.agreed:
        listed = plan.pool or plan.nodes
        nodes = [a for a in listed if a in present]
    else:
        first = plan.nodes[0] if plan.style == "master" else None  # master-address mode: the master is node 0
        nodes = sorted(present, key=lambda a: (a != first, _rank(present[a]), ipaddress.ip_address(a)))[:plan.nnodes]
    if create(store, prefix + "plan", {"nodes": nodes}):
        put(store, job_prefix(plan.job_id) + "gen", {"generation": generation, "nodes": nodes})


def _rank(hello: dict) -> int:
    rank = hello.get("rank")
    return rank if isinstance(rank, int) else 1 << 30


def _placed(plan: ClusterPlan, nodes: tuple) -> ClusterPlan:
    names = nodes if not plan.agreed or nodes != (plan.pool or plan.nodes) else plan.names
    return dataclasses.replace(plan, nodes=nodes, names=names, node_rank=nodes.index(plan.host), agreed=True)


def _check_agreement(view: GenerationView, placed: ClusterPlan) -> None:
    """Every machine of the plan against its first, and the first's launcher port free, the same check on every
    machine: one verdict for all."""
    with view._changed:
        hellos = {a: Hello.from_wire(view.hellos.get(a) or {}) for a in placed.nodes}  # one gone already too
    first = hellos[placed.nodes[0]]
    if first is not None and first.busy:  # node 0 cannot host paddle's launcher port: nobody launches
        raise UserError(first.busy)
    for k, address in enumerate(placed.nodes[1:], start=1):
        theirs = hellos[address]
        problem = ("its hello is not this version's" if theirs is None or first is None
                   else mismatch(first, theirs, who=placed.who(k)))
        if problem:
            raise UserError(problem)


def _missing(view: GenerationView, plan: ClusterPlan, expected: tuple, store: Store) -> str:
    reach = f"check they can reach the job's etcd {store.shown()}"
    with view._changed:  # every machine that registered (one that timed out first has left since)
        came = set(view.hellos)
    if plan.agreed:
        missing = ", ".join(f"node {(plan.pool or plan.nodes).index(a)} ({a})" for a in expected
                            if a not in came)
        return (f"{missing} did not join within Train.peer_timeout={plan.peer_timeout}s: start the same command "
                f"there, and {reach}")
    shown = f" (came: {', '.join(sorted(came))})" if came else ""
    fewest = (f"only {len(came)} of {plan.nnodes} machines came and Train.nnodes={plan.min_nodes}:"
              f"{plan.nnodes} needs at least {plan.min_nodes}: " if plan.min_nodes else "")
    return (f"{fewest}{plan.nnodes - len(came)} of {plan.nnodes} machine(s) did not join within "
            f"Train.peer_timeout={plan.peer_timeout}s{shown}: start the same command there, and {reach}")

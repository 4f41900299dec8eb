"""Preflight: before anything trains, every machine meets the first one on Train.port, bounded in time.

Node 0 checks that Train.port and Train.port + 1 are free here (naming the process that holds one), then
listens on Train.port; every other node connects (retrying) and says who it is and what it runs: job id, node
list, device layout, and a fingerprint (versions, resolved config, dataset lists; see fingerprint.py). When
all have joined and agree, node 0 answers "ok" to each and everyone launches; the connections stay open for
the heartbeats (heartbeat.py). Otherwise every node fails with one line naming the missing or differing
node and what differs, instead of paddle's launcher blocking forever. Plain TCP and JSON lines; no paddle.

Node 0 reads the hellos through its door (door.py: in arrival order on a selector; a connection that is not
from the node it claims, or fails the job secret (auth.py), is refused there and the job goes on); its listen
backlog and open-file limit are sized to the job.
"""

from __future__ import annotations

import dataclasses
import errno
import socket
import time
from typing import Optional

from paddledist.cluster import auth, fdlimit, ports, rendezvous
from paddledist.cluster.door import Door
from paddledist.cluster.hello import Hello, mismatch
from paddledist.cluster.heartbeat import Peers
from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.wire import LineSocket, connect_from
from paddledist.errors import UserError

_REPLY_GRACE_S = 10.0
"""A joining node waits this much beyond its own timeout, so node 0's verdict (with names) reaches it."""
REFUSAL_WAIT_S = 30.0
"""How long node 0, refusing to start, waits to tell the joining nodes why."""


def preflight(plan: ClusterPlan, facts: Optional[dict] = None) -> Optional[Peers]:
    """Return when every machine is present and agrees: the heartbeat links (not yet started; their `plan` is
    the agreed one, with every node's rank in master-address mode), or None for a one-machine job. Raise
    UserError naming what is wrong. `facts`: this node's fingerprint, compared too."""
    if plan.nnodes < 2:
        return None
    mine = hello(plan, facts)
    fdlimit.ensure_open_files(fdlimit.needed_by(plan.nnodes, plan.node_rank),
                              f"{plan.who()} of {plan.nnodes} machines")
    if plan.node_rank == 0:
        _check_ports_or_refuse(plan)
        links, plan = _serve(plan, mine)
    else:
        link, plan = _join(plan, mine)
        links = {0: link}
    return Peers(plan, links, plan.heartbeat_interval, plan.heartbeat_timeout)


def hello(plan: ClusterPlan, facts: Optional[dict] = None) -> Hello:
    """What a node says about itself; node 0 compares it with its own view (the resolved machine list too)."""
    return Hello.of(plan, facts)


def check_ports_free(plan: ClusterPlan) -> None:
    """Node 0 serves the preflight on Train.port, and rank 0 paddle's TCP store on Train.port + 1 (ips style) or
    its launcher paddle's master on the master port (master style)."""
    for port, what in ((plan.port, "Train.port"), plan.launcher_port):
        problem = ports.in_use(port, what, f"node 0 ({plan.host})")
        if problem:
            raise UserError(problem)


def _check_ports_or_refuse(plan: ClusterPlan) -> None:
    """check_ports_free; when it fails but Train.port itself is free (the other port is held, e.g. by another
    job's paddle store), the joining nodes are told why on Train.port for up to REFUSAL_WAIT_S, instead of
    waiting out their Train.peer_timeout and blaming node 0's silence."""
    try:
        check_ports_free(plan)
    except UserError as e:
        if ports.bind_error(plan.port) is None:
            with Door(plan) as door:
                meeting = Meeting(plan, None, time.monotonic() + min(plan.peer_timeout, REFUSAL_WAIT_S))
                _tell_everyone(door, meeting, {"ok": False, "error": str(e)})
        raise


def _serve(plan: ClusterPlan, mine: Hello) -> tuple[dict[int, LineSocket], ClusterPlan]:
    meeting = Meeting(plan, mine, time.monotonic() + plan.peer_timeout)
    with Door(plan) as door:
        try:
            _gather(door, meeting)
            nodes = plan.nodes if plan.agreed else rendezvous.agree(plan, meeting.ranks)
        except UserError as e:
            _tell_everyone(door, meeting, {"ok": False, "error": str(e)})
            raise
    if plan.agreed:
        for link in meeting.joined.values():
            link.send({"ok": True})
        return meeting.joined, plan
    links = {nodes.index(address): link for address, link in meeting.joined.items()}
    for node, link in links.items():
        link.send({"ok": True, "nodes": list(nodes), "node": node})
    return links, dataclasses.replace(plan, nodes=nodes, agreed=True)


@dataclasses.dataclass
class Meeting:
    """Node 0's preflight so far: who joined (node or address -> connection), the platform's rank each gave
    (all the rendezvous reads: a whole hello holds the machine list, and a thousand of them kept until everyone
    came is O(nodes^2)), and who has been told the verdict."""

    plan: ClusterPlan
    mine: Optional[Hello]
    deadline: float
    joined: dict = dataclasses.field(default_factory=dict)
    ranks: dict = dataclasses.field(default_factory=dict)
    told: set = dataclasses.field(default_factory=set)


def _gather(door: Door, meeting: Meeting) -> None:
    plan, joined = meeting.plan, meeting.joined
    while len(joined) < plan.nnodes - 1:
        got = door.next(meeting.deadline)
        if got is None and _enough(plan, joined):
            print(f"paddledist: continuing with {len(joined) + 1} of {plan.nnodes} machines (Train.nnodes="
                  f"{plan.min_nodes}:{plan.nnodes}; came within Train.peer_timeout={plan.peer_timeout}s: "
                  f"{', '.join([plan.host, *sorted(joined)])})", flush=True)
            return
        if got is None:
            raise UserError(_missing_message(plan, joined))
        link, theirs = got
        problem = mismatch(meeting.mine, theirs) or _duplicate(theirs, joined, plan)
        if problem:
            _answer(link, {"ok": False, "error": problem})
            meeting.told.add(str(theirs.key(plan)))
            raise UserError(problem)
        joined[theirs.key(plan)] = link
        meeting.ranks[theirs.key(plan)] = theirs.rank


def _tell_everyone(door: Door, meeting: Meeting, verdict: dict) -> None:
    """Answer every node that came with the verdict; keep answering late ones until all were told or the
    deadline passes, so that no node waits out its timeout without knowing why."""
    meeting.told.update(map(str, meeting.joined))
    for link in meeting.joined.values():
        _answer(link, verdict)
    while not _all_told(meeting.plan, meeting.told):
        got = door.next(meeting.deadline)
        if got is None:
            return
        link, theirs = got
        meeting.told.add(str(theirs.key(meeting.plan)))
        _answer(link, verdict)


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


def _duplicate(theirs: Hello, joined: dict, plan: ClusterPlan) -> Optional[str]:
    node = theirs.key(plan)
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
    missing = [plan.who(i) for i in range(1, plan.nnodes) if i not in joined]
    return (f"{', '.join(missing)} did not join within Train.peer_timeout={plan.peer_timeout}s: start the same "
            f"command there, and check they can reach {plan.nodes[0]}:{plan.port} over TCP")


def _join(plan: ClusterPlan, mine: Hello) -> tuple[LineSocket, ClusterPlan]:
    deadline = time.monotonic() + plan.peer_timeout
    while True:
        link = LineSocket(_connect(plan, deadline))
        reply = _answer_to(link, plan, mine)
        if reply is not None or time.monotonic() >= deadline:
            break
        link.close()  # node 0 closed it unanswered (it heard nothing from us in time): dial again
        time.sleep(0.5)
    try:
        if reply is None:
            raise UserError(f"node 0 ({plan.nodes[0]}) gave no preflight answer within Train.peer_timeout="
                            f"{plan.peer_timeout}s; look at its output")
        if not reply.get("ok"):
            raise UserError(f"node 0 ({plan.nodes[0]}) reports: {reply.get('error')}")
        return link, rendezvous.placed(plan, reply)
    except UserError:
        link.close()
        raise


def _answer_to(link: LineSocket, plan: ClusterPlan, mine: Hello) -> Optional[dict]:
    """Node 0's answer to this node's hello on `link` (None: closed or timed out without one)."""
    try:
        _introduce(link, plan, mine)
    except UserError:
        link.close()
        raise
    return link.read(timeout=plan.peer_timeout + _REPLY_GRACE_S)


def _introduce(link: LineSocket, plan: ClusterPlan, mine: Hello) -> None:
    """Read node 0's greeting, answer with this node's hello (sealed with the job secret, if any)."""
    hub = f"node 0 ({plan.nodes[0]}:{plan.port})"
    greet = link.read(timeout=plan.peer_timeout + _REPLY_GRACE_S)
    first, seal = auth.introduce(greet, mine.to_wire(), plan.secret, hub)
    try:
        link.send(first)
    except OSError as e:
        raise UserError(f"node 0 ({plan.nodes[0]}) dropped the preflight connection ({e.strerror})") from None
    link.seal = seal


def _connect(plan: ClusterPlan, deadline: float) -> socket.socket:
    """A connection to node 0 sent from this node's own listed address, which node 0 checks."""
    master = (plan.nodes[0], plan.port)
    while True:
        remaining = deadline - time.monotonic()
        try:
            return connect_from(plan.host, master, max(min(remaining, 2.0), 0.1))
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

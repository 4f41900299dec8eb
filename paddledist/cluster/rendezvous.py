"""What the preflight's meeting decides about the machines themselves: whether two nodes see the same machine
list (a host name resolving differently is named), and, in master-address mode, every node's rank.

Ranks in master mode: the machine holding the master's address is node 0 (it hosts paddle's master and rank
0); the others take the platform's rank when every one has one, else the order of their IPv4 addresses, so the
same machines always get the same ranks whatever order they arrive in. Pure functions over the hello messages.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import TYPE_CHECKING, Optional

from paddledist.cluster.plan import ClusterPlan
from paddledist.errors import UserError

if TYPE_CHECKING:
    from paddledist.cluster.hello import Hello

_FIX_NAMES = "make every machine's /etc/hosts or DNS give each name the same IPv4 address"


def nodes_mismatch(who: str, mine: "Hello", theirs: "Hello") -> Optional[str]:
    """Why two nodes do not see the same machines, naming a host name that resolves differently; or None."""
    if theirs.agreed != mine.agreed or theirs.style != mine.style:
        return (f"{who} names the machines with {theirs.origin} (launch style {theirs.style}), node 0 "
                f"with {mine.origin} (launch style {mine.style}); run the same config on every machine")
    a, b = mine.nodes, theirs.nodes
    if len(b) != len(a):
        return f"{who} counts {len(b)} machines, node 0 {len(a)}; run the same config on every machine"
    if not mine.agreed:  # only the master is known to all; its name may differ (Kubeflow: IP vs pod name)
        if a[0] != b[0]:
            return f"{who} meets the master at {b[0]} (from {show(theirs.names)}), node 0 is {a[0]}; {_FIX_NAMES}"
    elif theirs.names != mine.names:
        return (f"{who} has machines {show(theirs.names)}, node 0 has {show(mine.names)}; "
                "run the same config on every machine")
    elif a != b:  # compared whole first: node 0 checks every joining node's list
        k = next(k for k in range(len(a)) if a[k] != b[k])
        name = (mine.names or a)[k]
        return f"{who}: {name!r} resolves to {b[k]} there, to {a[k]} on node 0; {_FIX_NAMES}"
    if theirs.master_port != mine.master_port:
        return f"{who} uses master port {theirs.master_port}, node 0 {mine.master_port}"
    return None


def show(value: object) -> str:
    """A list as the comma-separated text a user wrote it in."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def agree(plan: ClusterPlan, ranks: dict) -> tuple[str, ...]:
    """Every node's address in rank order (master mode): node 0 first, then the platform's ranks, else by
    address. `ranks`: address -> the platform's rank the joining node gave, or None."""
    given = [r for r in ranks.values() if r is not None]
    if not given:
        others = sorted(ranks, key=ipaddress.ip_address)
        return (plan.host, *others)
    count = len(ranks) + 1  # fewer than plan.nnodes when Train.nnodes MIN:MAX continues with those that came
    if len(given) != len(ranks) or set(given) != set(range(1, count)):
        shown = ", ".join(f"{a}: {r}" for a, r in sorted(ranks.items()))
        raise UserError(f"the platform's node ranks do not fit together ({shown}; node 0 is {plan.host}): every "
                        f"joining machine needs a distinct rank in 1..{count - 1}, or none")
    return (plan.host, *sorted(ranks, key=lambda a: ranks[a]))


def placed(plan: ClusterPlan, reply: dict) -> ClusterPlan:
    """This joining node's plan once node 0 has agreed the ranks (master mode); unchanged otherwise."""
    nodes, node = reply.get("nodes"), reply.get("node")
    if plan.agreed or nodes is None:
        return plan
    count = len(nodes) if isinstance(nodes, list) else 0
    if not isinstance(node, int) or not 0 < node < count or not (plan.min_nodes or plan.nnodes) <= count <= plan.nnodes:
        raise UserError(f"node 0 ({plan.nodes[0]}) answered with a rank this node cannot take: {node!r}")
    if nodes[node] != plan.host:
        raise UserError(f"node 0 ({plan.nodes[0]}) placed this node as {nodes[node]}, but it is {plan.host}")
    return dataclasses.replace(plan, nodes=tuple(nodes), node_rank=node, agreed=True)

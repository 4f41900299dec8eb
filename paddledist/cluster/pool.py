"""A machine pool: Train.dist_ips with Train.nnodes=MIN:MAX (MAX = the length of the list, MIN more than half of it).

The job starts on every listed machine. After a loss, with Train.max_restarts left, each survivor drops the node(s)
its loss verdict names (heartbeat.py: "node K (address) lost: ...", the same words on every survivor: the hub
relays its own verdict, and a lost hub is seen by every other node on its own link) from its own view of the
list; the next launch's plan is the rest of the list in list order, so the first live machine is the new hub and
rank 0 on every survivor alike. With fewer than MIN left the job stops: the other side of a cut network may hold
the quorum. Pure: no sockets, no paddle.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from paddledist.cluster.plan import ClusterPlan

_LOST = re.compile(r"\bnode (\d+) \(([^)\s]+)\) lost\b")
"""heartbeat.Peers' loss verdicts (and the runner's causes that carry them)."""


def is_pool(plan: ClusterPlan) -> bool:
    """A machine list (ranks agreed from the start) with a range of machine counts: Train.nnodes=MIN:MAX."""
    return bool(plan.pool) and plan.agreed and plan.nnodes > 1


def lost_in(cause: Optional[str], plan: ClusterPlan) -> list[str]:
    """The addresses of `plan`'s nodes that `cause` says were lost (index and address must both match)."""
    found = []
    for index, address in _LOST.findall(cause or ""):
        k = int(index)
        if 0 <= k < plan.nnodes and plan.nodes[k] == address and address != plan.host and address not in found:
            found.append(address)
    return found


def without(plan: ClusterPlan, lost: list[str]) -> ClusterPlan:
    """`plan` without the `lost` machines, in list order (the first that is left is node 0, the hub)."""
    return placed_on(plan, tuple(address for address in plan.nodes if address not in lost))


def placed_on(plan: ClusterPlan, nodes: tuple) -> ClusterPlan:
    """`plan` on `nodes` (listed addresses, in list order); named by address, the same on every node whichever
    way it came to this list (the preflight compares the names)."""
    return dataclasses.replace(plan, nodes=nodes, names=nodes, node_rank=nodes.index(plan.host))


def next_plan(plan: ClusterPlan, cause: Optional[str]) -> tuple[Optional[ClusterPlan], str]:
    """The plan of the next launch after a failure and a line for the log; None when fewer than Train.nnodes MIN
    machines are left (no quorum: the job must stop). Outside pool mode the plan is unchanged."""
    if not is_pool(plan):
        return plan, ""
    lost = lost_in(cause, plan)
    if not lost:
        return plan, ""
    left = without(plan, lost)
    if left.nnodes < plan.min_nodes:
        return None, (f"{left.nnodes} of the listed machines left after losing {', '.join(lost)}, fewer than "
                      f"Train.nnodes MIN={plan.min_nodes} (a quorum of the list): not restarting")
    return left, (f"dropping {', '.join(lost)}: re-forming on {left.nnodes} machine(s) {','.join(left.nodes)}; "
                  f"{left.nodes[0]} is the hub and rank 0; this node is node {left.node_rank}")

"""What a machine says about itself when it registers in etcd, as one frozen dataclass with one encode/decode
pair, and the verdict of every machine on the others' against the first's (`mismatch`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from paddledist.cluster.fingerprint import differences
from paddledist.cluster.plan import ClusterPlan

_MAX_SHOWN = 4
"""Differences listed in one message."""
_FIX_NAMES = "make every machine's /etc/hosts or DNS give each name the same IPv4 address"


@dataclass(frozen=True)
class Hello:
    job: str
    nodes: tuple
    """The machine list as this node resolved it (master mode: the master's address and its own)."""
    node: int
    """This node's index (master mode: provisional until node 0 places it)."""
    names: tuple
    """The machines as given (host names or addresses)."""
    address: str
    rank: Optional[int]
    """The platform's rank, if any (master mode)."""
    agreed: bool
    style: str
    master_port: int
    origin: str
    kind: str
    nproc: int
    facts: dict
    """The fingerprint (fingerprint.py): versions, config and dataset digests."""
    busy: str = ""
    """Why this machine could not be node 0 (its launcher's port in use), "" when it can."""
    restarts: tuple = ()
    """The job's restarts so far as this machine knows them: a machine taken into a running pool adopts the
    longest of the plan's, for rank 0's results."""

    @classmethod
    def of(cls, plan: ClusterPlan, facts: Optional[dict] = None) -> "Hello":
        return cls(job=plan.job_id, nodes=tuple(plan.nodes), node=plan.node_rank, names=tuple(plan.names),
                   address=plan.host, rank=plan.platform_rank, agreed=plan.agreed, style=plan.style,
                   master_port=plan.master_port, origin=plan.origin, kind=plan.device.kind,
                   nproc=plan.nproc_per_node, facts=facts or {})

    def to_wire(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_wire(cls, data: dict) -> Optional["Hello"]:
        """The hello in `data`, or None when a field is missing or of another type (not this version's)."""
        values = {}
        for field in dataclasses.fields(cls):
            value = data.get(field.name)
            kind = _KINDS[field.name]
            if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
                return None
            values[field.name] = tuple(value) if isinstance(value, list) else value
        if not all(isinstance(v, str) for v in values["nodes"] + values["names"]):
            return None
        return cls(**values)


_KINDS = {"job": str, "nodes": list, "node": int, "names": list, "address": str, "rank": (int, type(None)),
          "agreed": bool, "style": str, "master_port": int, "origin": str, "kind": str, "nproc": int, "facts": dict,
          "busy": str, "restarts": list}


def _as_tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def mismatch(mine: Hello, theirs: Hello, who: str) -> Optional[str]:
    """Why a machine of the plan (named `who`) cannot be part of this job next to the first (`mine`), or None."""
    for key, what in (("job", "Train.job_id"), ("kind", "Global.device kind"),
                      ("nproc", "number of processes per machine (Global.device ids)")):
        if getattr(theirs, key) != getattr(mine, key):
            return (f"{who} has {what} {getattr(theirs, key)}, node 0 has {getattr(mine, key)}; "
                    "run the same config on every machine")
    different = nodes_mismatch(who, mine, theirs)
    if different:
        return different
    found = differences(mine.facts, theirs.facts)
    if found:
        more = f" (and {len(found) - _MAX_SHOWN} more)" if len(found) > _MAX_SHOWN else ""
        return (f"{who} differs from node 0: {'; '.join(found[:_MAX_SHOWN])}{more}; every machine needs the same "
                "code, config and dataset")
    return None


def nodes_mismatch(who: str, mine: Hello, theirs: Hello) -> Optional[str]:
    """Why two nodes do not see the same machines, naming a host name that resolves differently; or None."""
    if theirs.agreed != mine.agreed or theirs.style != mine.style:
        return (f"{who} names the machines with {theirs.origin} (launch style {theirs.style}), node 0 "
                f"with {mine.origin} (launch style {mine.style}); run the same config on every machine")
    a, b = mine.nodes, theirs.nodes
    if len(b) != len(a):
        return f"{who} counts {len(b)} machines, node 0 {len(a)}; run the same config on every machine"
    if not mine.agreed:  # only the master is known to all; its name may differ (Kubeflow: IP vs pod name)
        if a[0] != b[0]:
            return f"{who} meets the master at {b[0]} (from {_show(theirs.names)}), node 0 is {a[0]}; {_FIX_NAMES}"
    elif theirs.names != mine.names:
        return (f"{who} has machines {_show(theirs.names)}, node 0 has {_show(mine.names)}; "
                "run the same config on every machine")
    elif a != b:
        k = next(k for k in range(len(a)) if a[k] != b[k])
        name = (mine.names or a)[k]
        return f"{who}: {name!r} resolves to {b[k]} there, to {a[k]} on node 0; {_FIX_NAMES}"
    if theirs.master_port != mine.master_port:
        return f"{who} uses master port {theirs.master_port}, node 0 {mine.master_port}"
    return None


def _show(value: object) -> str:
    """A list as the comma-separated text a user wrote it in."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)

"""The supervisors' heartbeat messages, each a frozen dataclass, with one encode/decode pair at the wire.

On the wire each is one JSON object told apart by its first key, as since the first version: {"beat": node},
{"done": node}, {"all_done": true}, {"stop": reason, "node": node}, {"preempt": why, "node": node},
{"lost": node, "why": why}. `decode` returns None for anything else, or for a field of the wrong type, so the
receiving code never reads a field that is not there. A peer's state is one NodeState per node.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union


class NodeState(enum.Enum):
    """What a node has said of itself: its closing connection is news only while it is LIVE."""

    LIVE = "live"
    DONE = "done"
    """Finished cleanly ("done")."""
    STOPPED = "stopped"
    """Said why its ranks failed ("stop"): the verdict is that, not its closing."""
    LOST = "lost"
    """Closed or fell silent while live: a loss."""

    @property
    def finished(self) -> bool:
        return self in (NodeState.DONE, NodeState.STOPPED)


@dataclass(frozen=True)
class Beat:
    node: int


@dataclass(frozen=True)
class Done:
    node: int


@dataclass(frozen=True)
class AllDone:
    pass


@dataclass(frozen=True)
class Stop:
    reason: str
    node: int
    """The node whose ranks failed (relayed by the hub, so not the link's own node)."""


@dataclass(frozen=True)
class Preempt:
    why: str
    node: int


@dataclass(frozen=True)
class Lost:
    node: int
    why: str


Message = Union[Beat, Done, AllDone, Stop, Preempt, Lost]


def encode(message: Message) -> dict:
    if isinstance(message, (Beat, Done)):
        return {"beat" if isinstance(message, Beat) else "done": message.node}
    if isinstance(message, AllDone):
        return {"all_done": True}
    if isinstance(message, Stop):
        return {"stop": message.reason, "node": message.node}
    if isinstance(message, Preempt):
        return {"preempt": message.why, "node": message.node}
    return {"lost": message.node, "why": message.why}


def decode(data: dict, sender: int) -> Optional[Message]:
    """The message in `data` from the link of node `sender` (the node a stop or preemption without a valid
    "node" is about), or None when it is not one."""
    if "beat" in data or "done" in data:
        node = data.get("beat", data.get("done"))
        return (Beat if "beat" in data else Done)(node if _is_int(node) else sender)
    if data.get("all_done") is True:
        return AllDone()
    node = data["node"] if _is_int(data.get("node")) else sender
    if isinstance(data.get("stop"), str):
        return Stop(data["stop"], node)
    if isinstance(data.get("preempt"), str):
        return Preempt(data["preempt"], node)
    if _is_int(data.get("lost")):
        return Lost(data["lost"], str(data.get("why")))
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

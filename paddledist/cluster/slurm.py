"""Slurm's node lists: `node[01-04,07],gpu5` -> ("node01", ..., "node07", "gpu5"), and this node's place.

Pure functions, no scontrol: `srun` runs one task per node with SLURM_JOB_NODELIST, SLURM_NNODES and
SLURM_NODEID set, which is all a job needs to know its machines (scontrol may be absent on compute nodes).
"""

from __future__ import annotations

import itertools
import re
from typing import Mapping, Optional

from paddledist.errors import UserError

_GROUP = re.compile(r"\[([^\[\]]*)\]")


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets: `a[1,2],b` -> ["a[1,2]", "b"]."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced brackets in {text!r}")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise ValueError(f"unbalanced brackets in {text!r}")
    return parts + [current]


def _range_items(group: str) -> list[str]:
    """`01-03,7` -> ["01", "02", "03", "7"]; the start's width keeps zero padding, as Slurm does."""
    items = []
    for piece in group.split(","):
        low, sep, high = piece.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"bad range {piece!r}")
        if not sep:
            items.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"range {piece!r} runs backwards")
        items += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return items


def _expand_entry(entry: str) -> list[str]:
    """One host expression, possibly with several bracket groups (`r[1-2]n[1-2]`: their product)."""
    pieces = _GROUP.split(entry)  # literal, group, literal, group, ..., literal
    choices = [[p] if i % 2 == 0 else _range_items(p) for i, p in enumerate(pieces)]
    return ["".join(parts) for parts in itertools.product(*choices)]


def expand_nodelist(text: str) -> tuple[str, ...]:
    """Host names in Slurm's order; ValueError for a malformed list."""
    names: list[str] = []
    for entry in split_top_level(text.strip()):
        entry = entry.strip()
        if not entry or "[" in _GROUP.sub("", entry) or "]" in _GROUP.sub("", entry):
            raise ValueError(f"bad host expression {entry!r}")
        names += _expand_entry(entry)
    return tuple(names)


def slurm_nodes(env: Mapping[str, str]) -> Optional[tuple[tuple[str, ...], int]]:
    """(host names, this node's index) from an srun step's environment, or None outside Slurm."""
    text = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not text:
        return None
    try:
        names = expand_nodelist(text)
    except ValueError as e:
        raise UserError(f"SLURM_JOB_NODELIST={text!r} cannot be read ({e}); run under srun/sbatch") from None
    count, node = env.get("SLURM_NNODES", str(len(names))), env.get("SLURM_NODEID")
    if not count.isdigit() or int(count) != len(names):
        raise UserError(f"SLURM_NNODES={count} but SLURM_JOB_NODELIST={text!r} names {len(names)} hosts")
    if node is None or not node.isdigit() or int(node) >= len(names):
        raise UserError(f"SLURM_NODEID={node!r} is not a node of {text!r}; start one task per node with "
                        "`srun --ntasks-per-node=1`")
    return names, int(node)

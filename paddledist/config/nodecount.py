"""Train.nnodes: a machine count N, or an elastic range MIN:MAX (as paddle's launcher writes `--nnodes 2:4`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

from paddledist.errors import UserError

_FORM = re.compile(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?")


@dataclass(frozen=True)
class NodeCount:
    """How many machines a job runs on: at most `most`, and it may continue with as few as `least`."""

    least: int
    most: int

    @property
    def elastic(self) -> bool:
        return self.least < self.most


def parse_nnodes(value: Union[str, int, None], key: str = "Train.nnodes") -> Optional[NodeCount]:
    """`3` or "3" -> NodeCount(3, 3); "2:4" -> NodeCount(2, 4); None -> None; anything else: one-line UserError."""
    if value is None:
        return None
    text = str(value)
    found = _FORM.fullmatch(text)
    if not found:
        raise UserError(f"{key}={text!r} is not a machine count N or a range MIN:MAX; e.g. -o {key}=2 or "
                        f"-o {key}=2:4 (in a YAML file quote the range: \"2:4\")")
    least, most = int(found.group(1)), int(found.group(2) or found.group(1))
    if least < 1:
        raise UserError(f"{key} must be >= 1, got {text}")
    if least > most:
        raise UserError(f"{key}={text}: a range is MIN:MAX, the smaller count first; e.g. -o {key}={most}:{least}")
    if found.group(2) and least < 2:
        raise UserError(f"{key}={text}: the low end of a range must be at least 2 machines; "
                        f"e.g. -o {key}=2:{max(most, 2)}, or one machine without Train.dist_master")
    return NodeCount(least, most)

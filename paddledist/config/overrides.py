"""The `-o Section.key=value` grammar: split on the first `=`, values parsed as YAML scalars, never evaluated."""

from __future__ import annotations

from typing import Any, Iterable

import yaml

from paddledist.errors import UserError


def parse_value(text: str) -> Any:
    """A YAML scalar or flow collection (`null`, `3`, `0.1`, `true`, `[a, b]`); anything else stays a string."""
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        return text


def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any]]:
    """`["A.b=1", "C.d=x=y", "E.f=null"]` -> `[("A.b", 1), ("C.d", "x=y"), ("E.f", None)]`.

    One item is one pair (a shell word), so values may hold spaces as well as `=`.
    """
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or key.startswith(".") or key.endswith(".") or ".." in key:
            raise UserError(f"-o {item!r}: expected Section.key=value, e.g. -o Train.batch_size=32")
        pairs.append((key, parse_value(raw)))
    return pairs

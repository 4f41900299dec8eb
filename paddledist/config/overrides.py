"""The `-o Section.key=value` grammar: split on the first `=`, values parsed as YAML scalars, never evaluated."""

from __future__ import annotations

from typing import Any, Iterable

from paddledist.config.safeload import parse_yaml
from paddledist.errors import UserError

MAX_VALUE_CHARS = 64 << 10
"""An `-o` value's length (a list of a few thousand addresses fits)."""

_NULLS = ("", "null", "Null", "NULL", "~")


def parse_value(text: str, as_text: bool = False) -> Any:
    """A YAML scalar or flow collection (`null`, `3`, `0.1`, `true`, `[a, b]`); anything else stays a string.

    With `as_text` (string-typed keys) the text is kept exactly as typed, so `0123`, `1e-3` or `a #b`
    are not turned into numbers or cut at `#` (outer spaces are dropped); only `null` and a quoted
    YAML string are still parsed.
    """
    stripped = text.strip()
    if as_text and stripped not in _NULLS and not _is_quoted(stripped):
        return stripped
    if not stripped:
        return None
    if len(text) > MAX_VALUE_CHARS:
        raise UserError(f"-o value of {len(text)} characters is longer than the {MAX_VALUE_CHARS} allowed")
    try:
        return parse_yaml(text, "-o value")
    except UserError as e:
        if "malformed YAML" in str(e):  # not YAML: the text itself (a path with a ':' or '#', ...)
            return text
        raise


def _is_quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""


def split_overrides(items: Iterable[str]) -> list[tuple[str, str]]:
    """`["A.b=1", "C.d=x=y"]` -> `[("A.b", "1"), ("C.d", "x=y")]`: the key and the raw text of its value.

    One item is one pair (a shell word), so values may hold spaces as well as `=`.
    """
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or key.startswith(".") or key.endswith(".") or ".." in key:
            raise UserError(f"-o {item!r}: expected Section.key=value, e.g. -o Train.batch_size=32")
        pairs.append((key, raw))
    return pairs


def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any]]:
    """`["A.b=1", "C.d=x=y", "E.f=null"]` -> `[("A.b", 1), ("C.d", "x=y"), ("E.f", None)]`."""
    return [(key, parse_value(raw)) for key, raw in split_overrides(items)]

"""Dotted keys of the schema (`Train.batch_size`): lookup with did-you-mean, their types, the full list."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Iterator, Union

from paddledist.config.schema import Config
from paddledist.errors import UserError

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def field_type(schema: Any, name: str) -> Any:
    return typing.get_type_hints(schema)[name]


def lookup(key: str, where: str) -> Any:
    """The schema type at `key` (a section's dataclass or a value's type); unknown keys raise `UserError`."""
    parts = key.split(".")
    schema: Any = Config
    for depth, part in enumerate(parts):
        if not dataclasses.is_dataclass(schema):
            raise UserError(f"{where}: {'.'.join(parts[:depth])} is a value, not a section (key {key})")
        names = [f.name for f in dataclasses.fields(schema)]
        if part not in names:
            raise UserError(_unknown_key_message(key, ".".join(parts[:depth]), names, where))
        schema = field_type(schema, part)
    return schema


def _unknown_key_message(key: str, prefix: str, known: list[str], where: str) -> str:
    last = key.split(".")[len(prefix.split(".")) if prefix else 0]
    full = [f"{prefix}.{name}" if prefix else name for name in known]
    close = difflib.get_close_matches(last, known, n=1, cutoff=0.6)
    hint = f"did you mean {full[known.index(close[0])]}?" if close else f"known keys: {', '.join(full)}"
    return f"{where}: unknown config key {key}; {hint}"


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """`Optional[int]` -> `(int, True)`; `int` -> `(int, False)`."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Union[tuple(rest)]), True
    return tp, tp is Any


def type_name(tp: Any) -> str:
    """Readable type for messages and the reference: "an integer", "a string or null", "a list of strings"."""
    base, optional = unwrap_optional(tp)
    if typing.get_origin(base) in (list, typing.List):
        name = "a list of strings"
    elif base is Any:
        return "any"
    else:
        name = _TYPE_NAMES.get(base, str(base).replace("typing.", ""))
    return f"{name} or null" if optional else name


def iter_keys(schema: Any = Config, prefix: str = "") -> Iterator[tuple[str, Any, dataclasses.Field]]:
    """Every leaf key in schema order: `(dotted key, type, dataclass field)`."""
    for f in dataclasses.fields(schema):
        tp = field_type(schema, f.name)
        if dataclasses.is_dataclass(tp):
            yield from iter_keys(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", tp, f

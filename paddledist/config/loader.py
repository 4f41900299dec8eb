"""YAML file -> schema -> `-o` overrides -> validation -> a frozen `Config`."""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from typing import Any, Iterable, Optional

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from paddledist.config.overrides import parse_overrides
from paddledist.config.schema import Config
from paddledist.config.validate import normalise, validate
from paddledist.errors import UserError


def load(path: Optional[str], overrides: Iterable[str] = ()) -> Config:
    """Load, override, validate and freeze a config; every user mistake raises `UserError`."""
    merged = OmegaConf.structured(Config)
    OmegaConf.set_readonly(merged, False)
    if path is not None:
        for key, value in _flatten(_read_yaml(path)):
            merged = _set(merged, key, value, path)
    for key, value in parse_overrides(overrides):
        merged = _set(merged, key, value)
    cfg = _to_object(merged)
    cfg = normalise(cfg)
    validate(cfg)
    return cfg


def _read_yaml(path: str) -> dict:
    if not os.path.isfile(path):
        raise UserError(f"config file not found: {path} (pass an existing YAML file with -c)")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"malformed YAML at {where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of sections (Global, Train, ...)")
    return data


def _flatten(data: dict, prefix: str = "") -> list[tuple[str, Any]]:
    items = []
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            items.extend(_flatten(value, full + "."))
        else:
            items.append((full, value))
    return items


def _set(merged: Any, key: str, value: Any, where: str = "-o") -> Any:
    """A new config with `key` set; OmegaConf checks the value against the schema's type."""
    _check_key(key, where)
    update: Any = _coerce(key, value)
    for part in reversed(key.split(".")):
        update = {part: update}
    try:
        return OmegaConf.merge(merged, update)
    except OmegaConfBaseException as e:
        raise UserError(_type_message(key, value, where, e)) from None


def _check_key(key: str, where: str) -> None:
    parts = key.split(".")
    schema: Any = Config
    for depth, part in enumerate(parts):
        if not dataclasses.is_dataclass(schema):
            raise UserError(f"{where}: {'.'.join(parts[:depth])} is a value, not a section (key {key})")
        names = {f.name: f for f in dataclasses.fields(schema)}
        if part not in names:
            prefix = ".".join(parts[:depth])
            raise UserError(_unknown_key_message(key, prefix, list(names), where))
        schema = _field_type(schema, part)
    if dataclasses.is_dataclass(schema):
        raise UserError(f"{where}: {key} is a section; set one of its keys, e.g. {key}.{dataclasses.fields(schema)[0].name}")


def _field_type(schema: Any, name: str) -> Any:
    return typing.get_type_hints(schema)[name]


def _unknown_key_message(key: str, prefix: str, known: list[str], where: str) -> str:
    last = key.split(".")[len(prefix.split(".")) if prefix else 0]
    close = difflib.get_close_matches(last, known, n=1, cutoff=0.6)
    full = lambda name: f"{prefix}.{name}" if prefix else name  # noqa: E731
    hint = f"; did you mean {full(close[0])}?" if close else f"; known keys: {', '.join(full(k) for k in known)}"
    return f"{where}: unknown config key {key}{hint}"


def _coerce(key: str, value: Any) -> Any:
    # `-o Train.dist_ips=a,b` arrives as the string "a,b": list-typed keys take comma lists.
    if key == "Train.dist_ips" and isinstance(value, str):
        return [part.strip() for part in value.split(",")]
    if key == "Global.mode" and isinstance(value, str) and "," in value:
        return [part.strip() for part in value.split(",")]
    return value


def _type_message(key: str, value: Any, where: str, error: OmegaConfBaseException) -> str:
    expected = _expected_type(key)
    return f"{where}: {key} must be {expected}, got {value!r} ({type(value).__name__})"


def _expected_type(key: str) -> str:
    schema: Any = Config
    for part in key.split("."):
        schema = _field_type(schema, part)
    text = str(schema).replace("typing.", "")
    return {"<class 'int'>": "an integer", "<class 'float'>": "a number", "<class 'bool'>": "true or false",
            "<class 'str'>": "a string"}.get(text, text)


def _to_object(merged: Any) -> Config:
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:  # a bug in the schema, not a user mistake
        raise RuntimeError(f"config could not be built: {e}") from e

"""YAML file -> schema -> `-o` overrides -> validation -> a frozen `Config`."""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any, Iterable, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from paddledist.config.keys import lookup, type_name, unwrap_optional
from paddledist.config.overrides import parse_value, split_overrides
from paddledist.config.safeload import read_yaml
from paddledist.config.schema import Config
from paddledist.config.validate import normalise, validate
from paddledist.errors import UserError


def load(path: Optional[str], overrides: Iterable[str] = ()) -> Config:
    """Load, override, validate and freeze a config; every user mistake raises `UserError`.

    Precedence: schema defaults < the YAML file at `path` < `overrides` (`Section.key=value`, in order).
    """
    merged = OmegaConf.structured(Config)
    _writable(merged)  # frozen dataclasses make every section read-only; the result is frozen again
    if path is not None:
        for key, value in _flatten(_read_yaml(path)):
            _set(merged, key, value, path)
    for key, raw in split_overrides(overrides):
        base, _ = unwrap_optional(lookup(key, "-o"))
        _set(merged, key, parse_value(raw, as_text=base is str), "-o")
    cfg = _to_object(merged)
    cfg = normalise(cfg)
    validate(cfg)
    return cfg


def _writable(node: Any) -> None:
    """Clear the read-only flag that each frozen section's node carries (the root's alone is not enough)."""
    OmegaConf.set_readonly(node, False)
    for key in node:
        child = node._get_node(key)
        if OmegaConf.is_dict(child):
            _writable(child)


def _read_yaml(path: str) -> dict:
    if not os.path.exists(path):
        raise UserError(f"config file not found: {path} (pass an existing YAML file with -c)")
    data = read_yaml(path, "config file (-c)")
    if data is None:
        raise UserError(f"config file {path} is empty; put at least a Global: section in it "
                        "(see configs/image_classification.yaml)")
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of sections (Global, Train, ...), "
                        f"got a {type(data).__name__}")
    return data


def _flatten(data: dict, prefix: str = "") -> list[tuple[str, Any]]:
    items = []
    for key, value in data.items():
        full = f"{prefix}{key}"
        # a mapping under a free-form key (Benchmark.env, Predict.hpip_config) is that key's value
        if isinstance(value, dict) and value and dataclasses.is_dataclass(lookup(full, "config")):
            items.extend(_flatten(value, full + "."))
        else:
            items.append((full, value))
    return items


def _set(merged: Any, key: str, value: Any, where: str) -> None:
    """Set `key` in `merged`, after checking the value against the schema's type."""
    tp = lookup(key, where)
    if dataclasses.is_dataclass(tp):
        if where != "-o" and (value is None or value == {}):  # a file's empty section (every key commented out)
            return
        raise UserError(f"{where}: {key} is a section; set one of its keys, e.g. "
                        f"{key}.{dataclasses.fields(tp)[0].name}")
    update: Any = _literal(key, _check_type(key, tp, _coerce(key, value), where), where)
    try:  # in place: a merge of the whole config per key deep-copied it every time (~80 ms a PaddleX config)
        OmegaConf.update(merged, key, update, merge=True)
    except OmegaConfBaseException:
        raise UserError(_type_message(key, tp, value, where)) from None


# PaddleX's docs and configs write null as Python's None (`-o Train.pretrain_weight_path=None`)
_NULL_WORDS = frozenset({"None", "none", "NONE", "Null", "null", "NULL", "~"})


# PaddleX's Train.amp levels; ours is on or off (O1 and O2 both mean paddle's AMP on a GPU here)
_AMP_LEVELS = {"OFF": False, "O1": True, "O2": True}


def _coerce(key: str, value: Any) -> Any:
    if isinstance(value, str) and value.strip() in _NULL_WORDS:
        return None
    if key == "Train.amp" and isinstance(value, str) and value.strip().upper() in _AMP_LEVELS:
        return _AMP_LEVELS[value.strip().upper()]
    # `-o Train.dist_ips=a,b` arrives as the string "a,b": list-typed keys take comma lists.
    if key in ("Train.dist_ips", "Global.mode") and isinstance(value, str) and "," in value:
        return [part.strip() for part in value.split(",")]
    if key == "Train.dist_ips" and isinstance(value, str):
        return [value.strip()]
    return value


def _check_type(key: str, tp: Any, value: Any, where: str) -> Any:
    """Strict types (OmegaConf alone takes 2 as true, "64" as 64, and raises a bare TypeError for a mapping)."""
    base, optional = unwrap_optional(tp)
    if base is float and isinstance(value, str):  # PyYAML reads 1e-3 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if (value is None and not optional) or (value is not None and not _fits(base, value)):
        raise UserError(_type_message(key, tp, value, where))
    return value


def _fits(base: Any, value: Any) -> bool:
    if base is Any:
        return True
    if typing.get_origin(base) in (list, List):
        return isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value)
    if isinstance(value, (list, dict)):
        return False
    if base is bool:
        return isinstance(value, bool)
    if base in (int, float):
        return isinstance(value, (int, base)) and not isinstance(value, bool)
    return True  # str: OmegaConf turns a YAML number into its text


def _literal(key: str, value: Any, where: str) -> Any:
    """Strings reach OmegaConf as plain text: `${...}` is escaped (no interpolation, no env lookups)."""
    if isinstance(value, list):
        return [_literal(key, item, where) for item in value]
    if isinstance(value, dict):
        return {k: _literal(key, v, where) for k, v in value.items()}
    if isinstance(value, str):
        if value.strip() == "???":  # OmegaConf's "missing" marker would silently keep the old value
            raise UserError(f"{where}: {key}: '???' is not a value; give a value or null")
        return value.replace("${", "\\${")
    return value


def _type_message(key: str, tp: Any, value: Any, where: str) -> str:
    shown = "null" if value is None else f"{value!r} ({type(value).__name__})"
    return f"{where}: {key} must be {type_name(tp)}, got {shown}"


def _to_object(merged: Any) -> Config:
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:  # a bug in the schema, not a user mistake
        raise RuntimeError(f"config could not be built: {e}") from e

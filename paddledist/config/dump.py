"""The resolved config as YAML text (printed at start, saved as config.yaml)."""

from __future__ import annotations

import dataclasses

import yaml

from paddledist.config.schema import Config


def to_dict(cfg: Config) -> dict:
    data = dataclasses.asdict(cfg)
    data["Global"]["mode"] = list(cfg.Global.mode) if len(cfg.Global.mode) > 1 else cfg.Global.mode[0]
    return data


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True)

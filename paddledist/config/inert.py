"""PaddleX 3.x keys that load (so PaddleX's own configs run unchanged) but change nothing here."""

from __future__ import annotations

from typing import Any

from paddledist.config.keys import iter_keys
from paddledist.config.schema import Config

_FIXED = ("Train.basic_config_path", "Evaluate.basic_config_path", "Export.basic_config_path",
          "Predict.use_hpip", "Predict.hpip_config", "Predict.hpi_config", "Predict.engine",
          "Predict.engine_config", "Predict.genai_config", "Predict.kernel_option.cpu_threads")
INERT = _FIXED + tuple(key for key, _, _ in iter_keys() if key.startswith("Benchmark."))
"""Every accepted key without an effect; the schema's docstring of each says so too."""


def _value(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def inert_keys_set(cfg: Config) -> list[str]:
    """The inert keys whose value differs from the schema default: what the user wrote and we ignore."""
    default = Config()
    return [key for key in INERT if _value(cfg, key) != _value(default, key)]


def inert_notice(cfg: Config) -> str | None:
    """One line for the start of a run naming the accepted keys that have no effect, or None."""
    keys = inert_keys_set(cfg)
    if not keys:
        return None
    return f"paddledist: accepted PaddleX keys with no effect here: {', '.join(keys)}"

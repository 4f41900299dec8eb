"""Where the default config and the bundled digits dataset live: inside the installed package (a wheel ships
them as package data under `paddledist/_bundled/`), or at the root of a source checkout."""

from __future__ import annotations

import os

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
INSTALLED = os.path.join(PACKAGE_DIR, "_bundled")
CHECKOUT = os.path.dirname(PACKAGE_DIR)
DEFAULT_CONFIG = "image_classification"


def root() -> str:
    """The folder holding `configs/` and `dataset/`: the wheel's copy when installed, else the checkout."""
    return INSTALLED if os.path.isdir(INSTALLED) else CHECKOUT


def config_path(name: str) -> str | None:
    """The packaged config called `name` (with or without .yaml), or None when there is none."""
    stem = name[:-5] if name.endswith(".yaml") else name
    if os.sep in stem or "/" in stem:
        return None
    path = os.path.join(root(), "configs", f"{stem}.yaml")
    return path if os.path.isfile(path) else None


def is_bundled(path: str) -> bool:
    """Whether `path` is one of the packaged configs (its relative paths then mean the bundled copies)."""
    folder = os.path.realpath(os.path.join(root(), "configs"))
    return os.path.dirname(os.path.realpath(path)) == folder


def dataset_override(path: str) -> list[str]:
    """For a packaged config whose Global.dataset_dir is relative and not found from the working folder:
    `-o Global.dataset_dir=<bundled copy>`, so the job trains from any folder (in a checkout's root the relative
    path still means what it says, the same text on every machine). Our own small file, parsed safely."""
    import yaml

    if not is_bundled(path):
        return []
    with open(path, encoding="utf-8") as f:
        dataset_dir = (yaml.safe_load(f) or {}).get("Global", {}).get("dataset_dir")
    if not isinstance(dataset_dir, str) or os.path.isabs(dataset_dir) or os.path.exists(dataset_dir):
        return []
    return [f"Global.dataset_dir={os.path.normpath(os.path.join(root(), dataset_dir))}"]

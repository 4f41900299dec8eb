"""PaddleX's own image-classification module configs and model list, as a test-only reference.

From the installed `paddlex` package when it is there (the `paddlex` test extra), else from its wheel
downloaded with --no-deps into the test cache (the same cache as tests/paddleclas_ref.py). Nothing of
PaddleX is committed here: the tests read PaddleX's files as PaddleX ships them.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PADDLEX = "paddlex==3.7.2"
CACHE = Path(os.environ.get("PADDLEDIST_TEST_CACHE", Path.home() / ".cache" / "paddledist-tests"))
MODULE = "paddlex/configs/modules/image_classification"
MODEL_LIST = "paddlex/modules/image_classification/model_list.py"


def _installed_root() -> Path | None:
    spec = importlib.util.find_spec("paddlex")
    return Path(spec.origin).parent.parent if spec and spec.origin else None


def _wheel_root() -> Path:
    target = CACHE / PADDLEX.replace("==", "-")
    if (target / MODULE).is_dir():
        return target
    wheels = CACHE / "wheels"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), PADDLEX]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"cannot download {PADDLEX} as the reference (no package registry?): {done.stderr[-300:]}")
    wheel = next(wheels.glob("paddlex-*.whl"))
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp, [n for n in archive.namelist() if n.startswith((MODULE, MODEL_LIST))])
    tmp.rename(target) if not target.exists() else None
    return target


def paddlex_root() -> Path:
    root = _installed_root()
    return root if root is not None and (root / MODULE).is_dir() else _wheel_root()


def module_configs() -> list[Path]:
    """PaddleX's shipped image-classification configs, one per model (paddlex/configs/modules/...)."""
    return sorted((paddlex_root() / MODULE).glob("*.yaml"))


def model_names() -> list[str]:
    """MODELS of PaddleX's image-classification module (its model_list.py), read without importing PaddleX."""
    tree = ast.parse((paddlex_root() / MODEL_LIST).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODELS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"no MODELS list in {MODEL_LIST}")

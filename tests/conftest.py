"""Shared fixtures. Keep this file small: helpers used by one test file belong in that file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


@pytest.fixture
def paddlex_yaml() -> Path:
    """A config with every key of PaddleX's image-classification module config."""
    return DATA / "paddlex_cls.yaml"


@pytest.fixture
def write_yaml(tmp_path):
    """`write_yaml(text, name="cfg.yaml") -> Path`: a config file in this test's temp dir."""
    def write(text: str, name: str = "cfg.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path
    return write


@pytest.fixture
def run_tool(tmp_path):
    """`run_tool("train.py", *args) -> CompletedProcess`: a real entry script in a subprocess, cwd = tmp_path."""
    def run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        return subprocess.run([sys.executable, str(REPO / "tools" / script), *map(str, args)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=timeout)
    return run

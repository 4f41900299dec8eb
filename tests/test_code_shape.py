"""The code-shape promises that are cheap to check: no function over 60 lines anywhere in the project (the
style guide's limit; most stay under 30)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
LIMIT = 60


def test_no_function_is_longer_than_60_lines():
    files = [*REPO.glob("paddledist/**/*.py"), *REPO.glob("tools/*.py"), *REPO.glob("benchmarks/*.py"),
             *REPO.glob("tests/*.py"), REPO / "setup.py"]
    long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in files for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LIMIT]
    assert len(files) > 50 and not long, long

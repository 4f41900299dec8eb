"""The code-shape promises that are cheap to check: no function over 40 lines in the package, tools and
benchmarks (issue 30's limit; most stay under 30), none over 60 in the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def long_functions(files: list[Path], limit: int) -> list[str]:
    return [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in files for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_of_the_project_is_longer_than_40_lines():
    files = [*REPO.glob("paddledist/**/*.py"), *REPO.glob("tools/*.py"), *REPO.glob("benchmarks/*.py"),
             REPO / "setup.py"]
    assert len(files) > 50
    assert not long_functions(files, 40)


def test_no_test_function_is_longer_than_60_lines():
    files = list(REPO.glob("tests/**/*.py"))
    assert len(files) > 50
    assert not long_functions(files, 60)


def test_no_file_of_the_package_is_longer_than_300_lines():
    files = list(REPO.glob("paddledist/**/*.py"))
    assert len(files) > 50
    long = [f"{p.relative_to(REPO)} ({n} lines)" for p in files if (n := len(p.read_text().splitlines())) > 300]
    assert not long, long

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


def module_imports(root: Path) -> dict[str, set[str]]:
    """paddledist module -> the paddledist modules it imports anywhere in its text (in functions and under
    TYPE_CHECKING too: a circle is one whether or not Python's import order happens to tolerate it)."""
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.glob("paddledist/**/*.py")}

    def known(name: str) -> str:
        while name not in files and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [base]).strip(".")
                targets |= {known(f"{base}.{a.name}") for a in node.names}
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def test_no_module_of_the_package_imports_itself_through_another():
    from graphlib import CycleError, TopologicalSorter

    graph = module_imports(REPO)
    assert len(graph) > 50 and graph["paddledist.stages.predict"] >= {"paddledist.inference.verify"}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        pytest.fail(f"an import circle: {' -> '.join(e.args[1])}")


def test_no_docstring_of_the_package_is_longer_than_12_lines():
    """The why in a few lines; the essay goes in docs/ (docs/design_notes.md)."""
    long = [f"{p.relative_to(REPO)}:{getattr(node, 'lineno', 1)} ({len(doc.splitlines())} lines)"
            for p in REPO.glob("paddledist/**/*.py") for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (doc := ast.get_docstring(node, clean=False)) and len(doc.splitlines()) > 12]
    assert not long, long


ABOVE = {"paddledist.engine": ("report", "stages", "launch", "cluster", "inference", "cli", "submit"),
         "paddledist.launch": ("engine", "stages", "inference", "models", "data", "report"),
         "paddledist.runfiles": ("engine", "launch", "stages", "cluster", "report")}
"""What a floor may not import: the engine runs in workers under everything, the launcher supervises them
without their code, and both read the files in runfiles/."""


def test_the_engine_and_the_launcher_import_nothing_above_them_and_not_each_other():
    graph = module_imports(REPO)
    leaks = [f"{module} -> {target}" for module, targets in graph.items() for floor, banned in ABOVE.items()
             if module == floor or module.startswith(floor + ".") for target in targets
             if any(target == f"paddledist.{b}" or target.startswith(f"paddledist.{b}.") for b in banned)]
    assert not leaks, leaks

"""Benchmarks stand on their own and the package has no import cycle: benchmarks import the installed package
(never tests/, never a sys.path edit), benchmark modules import each other without a cycle, their helper
programs are real modules (no Python source handed to `python -c`), and scaling.py runs without pytest."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"


def module_imports(path: Path, top_level_only: bool = True) -> set[str]:
    """Modules `path` imports (at module level, `if TYPE_CHECKING:` blocks left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def benchmark_graph() -> dict[str, set[str]]:
    names = {p.stem for p in BENCH.glob("*.py")}
    return {p.stem: {m.split(".")[0] for m in module_imports(p, top_level_only=False)} & names - {p.stem}
            for p in BENCH.glob("*.py")}


def package_graph() -> dict[str, set[str]]:
    """paddledist's module-level imports: `from pkg import sub` is an edge to pkg.sub, `from pkg import name`
    (a name pkg's __init__ defines or re-exports) an edge to pkg."""
    modules = {}
    for path in (REPO / "paddledist").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                edges |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                          for a in node.names}
        graph[name] = (edges & set(modules)) - {name}
    return graph


@pytest.mark.unit
def test_benchmarks_import_neither_tests_nor_edit_sys_path_nor_run_source_strings():
    problems = []
    for path in sorted(BENCH.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        imported = module_imports(path, top_level_only=False)
        if any(m.split(".")[0] in ("tests", "netns", "conftest", "pytest") for m in imported):
            problems.append(f"{path.name} imports from tests/ or pytest")
        if "sys.path" in text:
            problems.append(f"{path.name} edits sys.path")
        if '"-c", ' in text and '"""\nimport ' in text:
            problems.append(f"{path.name} hands Python source to python -c")
    assert not problems, problems


@pytest.mark.unit
def test_no_import_cycle_among_benchmarks_or_in_the_package():
    assert not cycles(benchmark_graph()), cycles(benchmark_graph())
    assert not cycles(package_graph()), cycles(package_graph())
    assert benchmark_graph()["scaling"] >= {"bench_base", "bench_hosts"}  # the graph sees what it should


@pytest.mark.unit
def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.multiproc
def test_the_scaling_benchmark_starts_without_pytest():
    code = ("import sys, runpy; sys.modules['pytest'] = None; sys.path.insert(0, sys.argv[1]); "
            "sys.argv = [sys.argv[2], '--help']; runpy.run_path(sys.argv[0], run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, str(BENCH), str(BENCH / "scaling.py")], capture_output=True,
                          text=True, timeout=120, cwd="/")
    assert done.returncode == 0 and "--link-mbit" in done.stdout, done.stderr[-2000:]

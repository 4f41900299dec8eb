"""Nothing a user or a file supplies is evaluated or unpickled outside the documented cases (docs/security.md):
a scan of every Python file under paddledist/ and tools/ for eval/exec, unsafe YAML, pickle and paddle.load,
shell commands. A new use must be justified in docs/security.md and added to ALLOWED here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("paddledist", "tools")

ALLOWED = {
    # CIFAR-10's python batches are pickles by the dataset's own definition (docs/security.md).
    ("paddledist/data/formats.py", "pickle.load"),
    # Checkpoints (.pdparams/.pdopt/.pdstates) are paddle.save pickles: only Train.resume_path,
    # Train.pretrain_weight_path, Evaluate/Export.weight_path, loaded here and nowhere else.
    ("paddledist/engine/checkpoint.py", "paddle.load"),
}

BUILTINS = {"eval", "exec", "compile", "__import__", "input"}
UNSAFE = {"pickle.load", "pickle.loads", "pickle.Unpickler", "cPickle.load", "marshal.load", "marshal.loads",
          "shelve.open", "dill.load", "dill.loads", "paddle.load", "yaml.unsafe_load", "yaml.full_load",
          "yaml.load_all", "os.system", "os.popen", "np.load", "numpy.load"}
SAFE_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader"}


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


def findings(path: Path) -> list[tuple[str, int, str]]:
    rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        if isinstance(node.func, ast.Name) and name in BUILTINS:
            found.append((rel, node.lineno, name))
        elif name in UNSAFE:
            found.append((rel, node.lineno, name))
        elif name == "yaml.load" and dotted(keywords.get("Loader", ast.Name("?"))).split(".")[-1] not in SAFE_LOADERS:
            found.append((rel, node.lineno, "yaml.load without a safe Loader"))
        elif "shell" in keywords and not (isinstance(keywords["shell"], ast.Constant) and not keywords["shell"].value):
            found.append((rel, node.lineno, f"{name}(shell=...)"))
    return found


def python_files() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (REPO / folder).rglob("*.py"))


def test_no_eval_exec_unsafe_yaml_pickle_or_shell_outside_the_documented_cases():
    unexpected = [f for p in python_files() for f in findings(p) if (f[0], f[2]) not in ALLOWED]
    assert not unexpected, "justify in docs/security.md and ALLOWED, or remove: " + repr(unexpected)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import yaml, pickle, subprocess\neval('1')\nyaml.load(s)\nyaml.load(s, Loader=yaml.SafeLoader)\n"
                      "pickle.loads(b)\nsubprocess.run('ls', shell=True)\nmodel.eval()\n")
    kinds = [kind for _, _, kind in findings(sample)]
    assert kinds == ["eval", "yaml.load without a safe Loader", "pickle.loads", "subprocess.run(shell=...)"]


def test_every_allowed_case_is_documented():
    doc = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    for rel, call in ALLOWED:
        assert rel in doc and call in doc, f"docs/security.md does not explain {call} in {rel}"
    for word in (".pdparams", ".pdopt", ".pdstates", "CIFAR"):
        assert word in doc


def test_plain_text_grep_agrees():
    """The same promise, checked without the parser: no bare eval( / exec( and no yaml.load( at all."""
    pattern = re.compile(r"(?<![\w.])(eval|exec)\(|yaml\.load\(")
    hits = [f"{p.relative_to(REPO)}:{n}" for p in python_files()
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line.split("#", 1)[0])]
    assert not hits, hits

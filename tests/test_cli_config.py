"""The real entry scripts in subprocesses: a valid config dry-runs with exit 0; every user error is
exit code 2, one line on stderr, no traceback, and nothing written to Global.output."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.multiproc

# Single-process, CPU: no cluster, no GPU needed.
LOCAL = ["Global.device=cpu", "Train.dist_ips=null"]
# A dry run checks the dataset and weight files too: point the PaddleX file's paths at what exists here.
HERE = [f"Global.dataset_dir={Path(__file__).resolve().parent.parent / 'dataset' / 'digits'}",
        "Train.pretrain_weight_path=null"]


def _assert_user_error(proc, *fragments: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith("paddledist: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_dry_run_paddlex_config(run_tool, paddlex_yaml, tmp_path):
    out = tmp_path / "out"
    proc = run_tool("train.py", "-c", paddlex_yaml, "-o", *LOCAL, *HERE, f"Global.output={out}", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out.exists(), "--dry-run must not write to Global.output"


def test_dry_run_output_with_equals_sign(run_tool, paddlex_yaml, tmp_path):
    out = tmp_path / "x=y"
    proc = run_tool("train.py", "-c", paddlex_yaml, "-o", *LOCAL, *HERE, "-o", f"Global.output={out}", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not out.exists()


MALFORMED = "Global:\n  model: LeNet\n  device: [cpu\nTrain:\n  batch_size: 8\n"

# (name, config text or None for the PaddleX file, overrides, fragments the one-line message must hold)
USER_ERRORS = [
    ("unknown key", None, ["Train.epoch_iters=3"], ["unknown config key Train.epoch_iters",
                                                   "did you mean Train.epochs_iters?"]),
    ("wrong type", None, ["Train.batch_size=abc"], ["Train.batch_size must be an integer", "'abc'"]),
    ("not evaluated", None, ["Train.batch_size=__import__('os').system('touch x')"],
     ["Train.batch_size must be an integer"]),
    ("malformed override", None, ["Train.batch_size"], ["expected Section.key=value"]),
    ("missing file", "MISSING", [], ["config file not found"]),
    ("malformed YAML", MALFORMED, [], ["malformed YAML at", ":4:"]),
    ("epochs", None, ["Train.epochs_iters=0"], ["Train.epochs_iters must be >= 1"]),
    ("batch size", None, ["Train.batch_size=0"], ["Train.batch_size must be >= 1"]),
    ("learning rate", None, ["Train.learning_rate=0"], ["Train.learning_rate must be", "> 0"]),
    ("device kind", None, ["Global.device=tpu"], ["Global.device", "'tpu'"]),
    ("device ids", None, ["Global.device=gpu:a"], ["Global.device", "'gpu:a'"]),
    ("device repeated", None, ["Global.device=cpu:0,0"], ["Global.device", "'cpu:0,0'"]),
]


@pytest.mark.parametrize("name, text, overrides, fragments", USER_ERRORS, ids=[e[0] for e in USER_ERRORS])
def test_user_error(run_tool, paddlex_yaml, tmp_path, name, text, overrides, fragments):
    out = tmp_path / "out"
    config = paddlex_yaml
    if text == "MISSING":
        config = tmp_path / "missing.yaml"
    elif text is not None:
        config = tmp_path / "bad.yaml"
        config.write_text(text)
    proc = run_tool("train.py", "-c", config, "-o", *LOCAL, f"Global.output={out}", *overrides, "--dry-run")
    _assert_user_error(proc, *fragments)
    assert not out.exists(), "a rejected config must not create Global.output"
    assert not (tmp_path / "x").exists(), "an override value was executed"
    assert not (tmp_path / "output").exists()


@pytest.mark.parametrize("script", ["train.py", "eval.py", "export.py", "predict.py", "check_dataset.py", "main.py"])
def test_every_tool_reports_user_errors(run_tool, paddlex_yaml, tmp_path, script):
    proc = run_tool(script, "-c", paddlex_yaml, "-o", *LOCAL, f"Global.output={tmp_path / 'out'}",
                    "-o", "Train.epoch_iters=3", "--dry-run")
    _assert_user_error(proc, "did you mean Train.epochs_iters?")
    assert not (tmp_path / "out").exists()


def test_ci_runs_the_readme_test_command():
    root = Path(__file__).resolve().parent.parent
    readme, ci = (root / "README.md").read_text(), (root / ".ci" / "run").read_text().splitlines()
    command = 'pip install -e ".[cpu,test,vdl]" && ruff check . && python -m pytest -q tests'
    assert command in readme
    assert all(part in ci for part in command.split(" && ")), "README's command 2 and .ci/run disagree"


@pytest.mark.parametrize("model", ["LeNet", "ResNet18"])
def test_launching_a_cpu_job_does_not_import_paddle(model, tmp_path):
    """The launching process checks a CPU job (model name, data, labels, device) without importing paddle:
    the import cost every job ~1.3 s of start-up before the launcher even began (benchmarks/scaling.py)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-X", "importtime", str(repo / "tools" / "train.py"), "-c",
                           str(repo / "configs" / "image_classification.yaml"), "-o", "Global.mode=train",
                           f"Global.dataset_dir={repo / 'dataset' / 'digits'}",
                           "Global.device=cpu:0,1", "Train.dist_ips=null", f"Global.model={model}",
                           f"Global.output={tmp_path / 'out'}", "--dry-run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "paddle.distributed.launch" in proc.stdout  # it did get as far as the launch command
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert {"paddledist.models", "paddledist.data.formats"} <= imported  # the preflight did run here
    assert "paddle" not in imported, "the launching process imported paddle"


"""Without paddle, every entry script (dry run included) stops at once with exit 2 and one line that gives both
install routes (the cpu extra, and the GPU build from PaddlePaddle's index), writing nothing: run for real in a
venv that has paddledist's other dependencies and no paddle. The wheel's console script gets the same check in
.ci/wheel, with its time."""

from __future__ import annotations

import importlib.metadata
import subprocess
import venv
from pathlib import Path

import pytest

from helpers.common import unavailable

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.multiproc
DEPENDENCIES = [r.split(";")[0] for r in importlib.metadata.requires("paddledist") if "extra ==" not in r]
"""paddledist's own requirements (setup.py's install_requires), none of them paddle."""
TOOLS = ("train", "eval", "export", "predict", "check_dataset", "main", "doctor")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A venv with paddledist's dependencies but no paddle (the checkout's tools put the package on sys.path)."""
    root = tmp_path_factory.mktemp("no-paddle") / "venv"
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *DEPENDENCIES], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        unavailable(f"cannot install paddledist's dependencies into a venv (no package registry?): "
                    f"{done.stderr[-300:]}")
    assert subprocess.run([str(python), "-c", "import paddle"], capture_output=True).returncode != 0
    return python


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_without_paddle_is_one_line_with_both_install_routes(bare_python, tmp_path, tool, dry_run):
    work = tmp_path / "work"
    work.mkdir()
    config = REPO / "configs" / "image_classification.yaml"
    argv = [str(bare_python), str(REPO / "tools" / f"{tool}.py"), "-c", str(config)]
    done = subprocess.run(argv + (["--dry-run"] if dry_run else []), cwd=work, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("paddledist: error: paddle is not installed"), done.stderr
    assert 'pip install "paddledist[cpu]"' in lines[0] and "paddlepaddle-gpu" in lines[0]
    assert "https://www.paddlepaddle.org.cn/packages/stable/cu" in lines[0]
    assert list(work.iterdir()) == []

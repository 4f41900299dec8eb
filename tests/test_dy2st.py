"""Train.dy2st (PaddleX's key): the forward runs through paddle.jit.to_static, and training reaches the same
parameters as in dygraph (the final digest of the default job, 2 epochs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiproc
REPO = Path(__file__).resolve().parent.parent


def train(tmp_path: Path, dy2st: bool) -> str:
    out = tmp_path / f"out-{dy2st}"
    argv = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" / "image_classification.yaml"),
            "-o", f"Global.output={out}", "-o", "Train.epochs_iters=2", "-o", f"Train.dy2st={dy2st}"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def test_dy2st_trains_as_a_static_program_to_the_same_parameters(tmp_path):
    static, dynamic = train(tmp_path, True), train(tmp_path, False)
    assert "paddle.jit.to_static" in static and "paddle.jit.to_static" not in dynamic
    assert "no effect here: Train.dy2st" not in static
    digest = [re.search(r"final parameter digest: (\w+)", log).group(1) for log in (static, dynamic)]
    assert digest[0] == digest[1]

"""A default run's stderr holds no line from paddle's C++ logging (job scripts read stderr): paddle 3.3's
F.softmax printed "Paddle static graph(PIR) not support input out tensor for now!!!!!" at every epoch's export."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\]")
"""glog's line prefix, as paddle's C++ writes it: W1204 22:30:46.747179 31655 eager_utils.cc:3584] ..."""


@pytest.mark.multiproc
def test_a_default_run_prints_nothing_from_paddles_cpp_logging(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c",
                           str(REPO / "configs" / "image_classification.yaml"), "-o", "Train.epochs_iters=2",
                           f"Global.output={tmp_path / 'out'}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "latest" / "inference" / "inference.json").is_file()  # the export did run
    cpp = [line for line in (done.stderr + done.stdout).splitlines() if GLOG.match(line)]
    assert cpp == [], cpp


@pytest.mark.unit
def test_the_export_softmax_falls_back_to_paddles_when_its_capability_fails(monkeypatch):
    import paddle

    from paddledist import paddle_internals as internals

    internals._probe.cache_clear()
    assert internals.export_softmax() is internals._pir_softmax
    monkeypatch.setenv(internals.DISABLE_VAR, "pir_softmax")
    assert internals.export_softmax() is paddle.nn.functional.softmax
    x = paddle.to_tensor([[1.0, 2.0, 3.0]])
    assert paddle.equal_all(internals._pir_softmax(x, -1), paddle.nn.functional.softmax(x, axis=-1))

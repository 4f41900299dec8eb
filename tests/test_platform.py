"""A training platform that starts the workers itself (paddle's variables already set): train, never relaunch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent


def test_workers_started_by_the_platform_train_in_place(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
           "--log_dir", str(tmp_path / "plat"),
           str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" / "image_classification.yaml"),
           "-o", "Global.device=cpu:0,1", "Train.epochs_iters=1", f"Global.output={out}",
           f"Global.dataset_dir={REPO / 'dataset' / 'digits'}"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    logs = "".join(p.read_text() for p in sorted((tmp_path / "plat").glob("workerlog.*")))
    assert done.returncode == 0, done.stdout[-2000:] + logs[-3000:]
    result = json.loads((out / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (2, True)
    # No second launcher inside the platform's workers: ours would have written logs/<node address>/.
    assert not (out / "logs" / "127.0.0.1").exists()
    assert "this node = node" not in logs

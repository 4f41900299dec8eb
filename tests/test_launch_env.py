"""The launch environment through the real launcher: variables a platform (or an old job script) leaves behind
that would steer paddle's launcher elsewhere are dropped, and the job trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent

LEFT_BEHIND = {
    # paddle's launcher takes these endpoints as its master and node count (plugins.collective_compatible):
    # passed through, it waits for machines that do not exist (measured: no worker starts within 25 s)
    "DISTRIBUTED_TRAINER_ENDPOINTS": "10.255.0.1:6000,10.255.0.2:6000",
    # paddle-operator's elastic mode, and fleet's legacy port: paddle 2.x switched to its legacy launcher on them
    "PADDLE_ELASTIC_JOB_ID": "default-job", "PADDLE_ELASTIC_SERVER": "10.255.0.3:2379", "FLAGS_START_PORT": "6000",
}


def test_legacy_launcher_variables_are_dropped_and_the_job_trains(tmp_path):
    env = {**os.environ, **LEFT_BEHIND}
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c",
                           str(REPO / "configs" / "image_classification.yaml"), "-o", "Global.device=cpu:0,1",
                           "Train.epochs_iters=1", f"Global.output={tmp_path / 'out'}",
                           f"Global.dataset_dir={REPO / 'dataset' / 'digits'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (2, True)
    worker_env = (tmp_path / "out" / "logs" / "127.0.0.1" / "workerlog.0").read_text()
    assert "DISTRIBUTED_TRAINER_ENDPOINTS" not in done.stdout + worker_env


def test_dry_run_lists_the_dropped_variables(tmp_path):
    env = {**os.environ, **LEFT_BEHIND}
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c",
                           str(REPO / "configs" / "image_classification.yaml"), "-o", "Global.device=cpu:0,1",
                           f"Global.output={tmp_path / 'out'}", "--dry-run"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in LEFT_BEHIND:
        assert f"unset {name}" in done.stdout.splitlines()


def test_every_launcher_variable_paddle_reads_is_dropped():
    """paddle's launcher maps these environment variables over its arguments; a platform sets several."""
    from paddle.distributed.launch.context.args_envs import env_args_mapping

    from paddledist.launch.builder import LAUNCHER_VARS

    assert set(env_args_mapping) - {"PADDLE_LOG_LEVEL"} <= set(LAUNCHER_VARS)
    assert {"PADDLE_ELASTIC_JOB_ID", "DISTRIBUTED_TRAINER_ENDPOINTS", "FLAGS_START_PORT"} <= set(LAUNCHER_VARS)

"""The bucket sync (paddle's all-reduce from a backward thread) in a real 2-process job through paddle's launcher:
the mean of the ranks' accumulated gradients on both ranks, one all-reduce per bucket per update and none for
the micro-batches before the last, and bf16 on the wire within bf16's rounding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddledist.engine.sync.bucket import plan_buckets

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent


def test_buckets_follow_backward_order_and_close_at_the_limit():
    assert plan_buckets([10, 5, 3, 8], 8) == [[3], [2, 1], [0]]
    assert plan_buckets([10, 5, 3, 8], 100) == [[3, 2, 1, 0]]
    assert plan_buckets([1], 1) == [[0]]
    assert plan_buckets([], 8) == []


def test_the_first_parameters_get_a_small_bucket_of_their_own_sent_last():
    # backward produces the first parameters' gradients last: they go in a bucket of at most last_limit floats
    # (at least one parameter), so little is left on the wire when backward ends
    assert plan_buckets([2, 2, 10, 5, 3, 8], 8, last_limit=5) == [[5], [4, 3], [2], [1, 0]]
    assert plan_buckets([2, 2, 10, 5, 3, 8], 8, last_limit=3) == [[5], [4, 3], [2], [1], [0]]
    assert plan_buckets([9, 2, 10], 8, last_limit=4) == [[2], [1], [0]]  # a first parameter above the limit
    assert plan_buckets([1, 1, 1, 1], 2, last_limit=100) == [[3, 2], [1, 0]]  # never above the bucket limit


def run_probe(tmp_path: Path, compression: str, disable: str = "") -> dict:
    log_dir = tmp_path / f"{compression}{disable}"
    done = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
                           str(log_dir), str(REPO / "tests" / "bucket_probe.py"), compression],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO), "PADDLEDIST_DISABLE_CAPABILITIES": disable})
    logs = {r: (log_dir / f"workerlog.{r}").read_text() for r in (0, 1)}
    assert done.returncode == 0, done.stdout[-2000:] + logs[0][-2000:] + logs[1][-2000:]
    return {r: json.loads(next(line for line in logs[r].splitlines() if line.startswith('{"rank"'))) for r in logs}


@pytest.mark.compat
@pytest.mark.parametrize("compression", ["none", "bf16"])
def test_bucket_sync_averages_accumulated_gradients_once_per_update(tmp_path, compression):
    out = run_probe(tmp_path, compression)
    buckets = out[0]["buckets"]
    assert buckets >= 3  # the small buckets split the model: several all-reduces, sent while backward ran
    for r in (0, 1):
        assert out[r]["exchanges"] == 3 and out[r]["sent"] == 3 * buckets
        assert out[r]["sent_after_skips"] == [0, 0, buckets, buckets, 2 * buckets, 2 * buckets]  # nothing sent
    for step in range(3):
        for k in range(6):
            want = (np.array(out[0]["local"][step][k]) + np.array(out[1]["local"][step][k])) / 2
            got = [np.array(out[r]["mean"][step][k], dtype=np.float32) for r in (0, 1)]
            assert np.array_equal(got[0], got[1])  # both ranks hold the same numbers, compressed or not
            tol = 1e-6 if compression == "none" else 2 ** -7  # bf16 keeps 8 significant bits
            np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol * np.abs(want).max())
    assert not np.any(out[0]["local"][0][4]) and np.any(out[1]["local"][0][4])  # rank 0 sent zeros for head_b
    for r in (0, 1):  # backward wrote into the buckets: every gradient is a view, after every update
        assert out[r]["views"] and out[r]["inside"] == [True, True, True], out[r]["inside"]


def test_without_the_grad_view_capability_gradients_are_copied_and_the_mean_is_the_same(tmp_path):
    views, copies = run_probe(tmp_path, "none"), run_probe(tmp_path, "none", disable="grad_view")
    for r in (0, 1):
        assert not copies[r]["views"] and copies[r]["inside"] == [False, False, False]
        assert copies[r]["mean"] == views[r]["mean"]  # bit for bit: the same sums and the same scaling


@pytest.mark.compat
def test_gloo_float16_all_reduce_is_still_broken_so_fp16_stays_refused_on_cpu(tmp_path):
    """Train.grad_compression=fp16 is refused on CPU because of this; when paddle fixes it, this fails."""
    script = tmp_path / "fp16.py"
    script.write_text("import paddle, paddle.distributed as d\nd.init_parallel_env()\n"
                      "x = paddle.full([64], 0.001, 'float16')\nd.all_reduce(x)\nprint('SUM', float(x[0]))\n")
    done = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
                           str(tmp_path / "log"), str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    line = next(x for x in (tmp_path / "log" / "workerlog.0").read_text().splitlines() if x.startswith("SUM"))
    assert line == "SUM inf"


@pytest.mark.compat
@pytest.mark.parametrize("claimed,expected", [(2, (None, "bucket")),
                                              (3, ("a SUM over 3 ranks gave [2.0, 2.0]", "flat"))])
def test_the_all_reduce_check_sums_over_every_rank_and_a_wrong_sum_moves_auto_off_bucket(tmp_path, claimed, expected):
    """Two real ranks: the sum of ones is the world size (2), so the bucket sync stays chosen; measured against a
    world size it cannot match (3) the check fails on every rank alike and auto takes the next sync."""
    done = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
                           str(tmp_path / "logs"), str(REPO / "tests" / "allreduce_probe.py"), str(claimed)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    logs = [(tmp_path / "logs" / f"workerlog.{r}").read_text() for r in (0, 1)]
    assert done.returncode == 0, done.stdout[-2000:] + logs[0][-2000:] + logs[1][-2000:]
    lines = [json.loads(next(x for x in log.splitlines() if x.startswith('{"rank"'))) for log in logs]
    assert [(x["missing"], x["chosen"]) for x in lines] == [expected, expected]

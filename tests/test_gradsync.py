"""Gradient averaging: which sync each job shape gets (pure), the AMD MKL switch, and shm, flat and paddle's
reducer ending a 2-rank epoch with the same parameters through the real launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

from paddledist.config import load
from paddledist.engine import cpu
from paddledist.engine.distenv import DistEnv
from paddledist.engine.gradsync import ShmSync, choose
from paddledist.errors import UserError

REPO = Path(__file__).resolve().parent.parent
BIG = 10**12

ONE, TWO, TWO_NODES = DistEnv(), DistEnv(world_size=2), DistEnv(world_size=4, nnodes=2)


@pytest.mark.parametrize("mode, kind, dist, shm_free, expected", [
    ("auto", "cpu", ONE, BIG, "none"),
    ("shm", "cpu", ONE, BIG, "none"),
    ("auto", "cpu", TWO, BIG, "shm"),
    ("auto", "cpu", TWO, 6 * 100, "shm"),
    ("auto", "cpu", TWO, 6 * 100 - 1, "flat"),  # slots for 2 ranks + result, twice over, do not fit
    ("auto", "cpu", TWO, None, "flat"),  # no /dev/shm
    ("auto", "cpu", TWO_NODES, BIG, "flat"),
    ("auto", "gpu", TWO, BIG, "reducer"),
    ("flat", "gpu", TWO, BIG, "flat"),
    ("reducer", "cpu", TWO, BIG, "reducer"),
])
def test_choose(mode, kind, dist, shm_free, expected):
    assert choose(mode, kind, dist, 100, shm_free) == expected


def test_shm_that_does_not_fit_is_refused_not_left_to_sigbus():
    with pytest.raises(UserError, match=r"Train.grad_sync=shm needs 1 MB free in /dev/shm, 0 MB are"):
        choose("shm", "cpu", TWO, 200_000, 1000)


@pytest.mark.parametrize("overrides, message", [
    (["Train.grad_sync=nccl"], r"Train.grad_sync: unknown value 'nccl'; use one of auto, reducer, shm, flat"),
    (["Train.grad_sync=flat", "Global.device=gpu:0,1"], r"Train.grad_sync=flat is for CPU jobs"),
    (["Train.grad_sync=shm", "Train.dist_ips=10.0.0.1,10.0.0.2"], r"Train.grad_sync=shm needs every rank on one"),
])
def test_impossible_grad_sync_is_a_user_error(overrides, message):
    with pytest.raises(UserError, match=message):
        load(None, overrides)


def test_cpuinfo_is_read_for_vendor_and_avx2(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert cpu.cpu_vendor(str(info)) == "AuthenticAMD" and cpu.has_avx2(str(info))
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n")
    assert not cpu.has_avx2(str(info))
    assert cpu.cpu_vendor(str(tmp_path / "missing")) == "" and not cpu.has_avx2(str(tmp_path / "missing"))


def test_fast_mkl_only_on_amd_and_only_when_asked(monkeypatch):
    assert cpu.cpu_env(True, "AuthenticAMD") == {"MKL_DEBUG_CPU_TYPE": "5"}
    assert cpu.cpu_env(True, "GenuineIntel") == {}
    assert cpu.cpu_env(False, "AuthenticAMD") == {}
    assert cpu.cpu_env(True, "AuthenticAMD", avx2=False) == {}  # MKL's AVX2 kernels would be illegal there
    monkeypatch.setattr(cpu, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(cpu, "has_avx2", lambda: True)
    env = {}
    assert cpu.apply_defaults(True, env) == {"MKL_DEBUG_CPU_TYPE": "5"} and env == {"MKL_DEBUG_CPU_TYPE": "5"}
    kept = {"MKL_DEBUG_CPU_TYPE": ""}  # the user's choice, even empty, wins
    assert cpu.apply_defaults(True, kept) == {"MKL_DEBUG_CPU_TYPE": ""}


def train(out: Path, *overrides: str) -> None:
    cmd = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" / "image_classification.yaml"),
           "-o", f"Global.output={out}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", "Global.model=LeNet",
           "Train.augment=False", "Train.warmup_steps=0", "Train.epochs_iters=1", "Train.batch_size=32",
           "Global.device=cpu:0,1", "Train.log_interval=5", *overrides]
    done = subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_shm_flat_and_reducer_reach_the_same_parameters(tmp_path):
    params, logs = {}, {}
    for mode in ("shm", "flat", "reducer"):
        train(tmp_path / mode, f"Train.grad_sync={mode}")
        params[mode] = paddle.load(str(tmp_path / mode / "latest" / "latest.pdparams"), return_numpy=True)
        logs[mode] = (tmp_path / mode / "logs" / "train.rank0.log").read_text()
    for mode in ("shm", "flat"):
        assert max(float(np.abs(params[mode][k] - params["reducer"][k]).max()) for k in params[mode]) < 1e-6
        assert f"gradient sync: {mode}" in logs[mode]
        assert " comm " in logs[mode] and "%" in logs[mode].split(" comm ")[1][:5]
    assert "comm (inside backward)" in logs["reducer"]


def _shm_barrier(rank: int, flags: np.ndarray, timeout: float) -> ShmSync:
    """The shm sync's barrier over `flags` (one per rank, as in the shared block), without a launched job."""
    sync = ShmSync.__new__(ShmSync)
    sync.dist, sync.flags, sync.arrivals, sync.timeout, sync.spin = DistEnv(rank, len(flags)), flags, 0, timeout, True
    return sync


def test_shm_barrier_passes_when_every_rank_arrived():
    flags = np.array([0, 1, 1], dtype=np.int64)  # ranks 1 and 2 are already at their first barrier
    sync = _shm_barrier(0, flags, 5)
    sync.barrier()
    assert flags[0] == 1


def test_shm_barrier_names_the_rank_that_never_arrives():
    sync = _shm_barrier(0, np.array([0, 1, 0], dtype=np.int64), 0.3)
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[2\] did not reach step 1's gradient exchange within 0.3 s"):
        sync.barrier()

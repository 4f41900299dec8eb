"""Gradient averaging: which sync each job shape gets (pure), the AMD MKL switch, and shm, flat and paddle's
reducer ending a 2-rank epoch with the same parameters through the real launcher."""

from __future__ import annotations

import contextlib
import functools
import mmap
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import pytest

from paddledist.config import load
from paddledist.engine import cpu
from paddledist.engine import sync as gradsync
from paddledist.engine.distenv import DistEnv
from paddledist.engine.sync import choose
from paddledist.errors import UserError


REPO = Path(__file__).resolve().parent.parent
BIG = 10**12

ONE, TWO, TWO_NODES = DistEnv(), DistEnv(world_size=2), DistEnv(world_size=4, nnodes=2)


@pytest.mark.unit
@pytest.mark.parametrize("mode, kind, dist, shm_free, expected", [
    ("auto", "cpu", ONE, BIG, "none"),
    ("shm", "cpu", ONE, BIG, "none"),
    ("auto", "cpu", TWO, BIG, "shm"),
    ("auto", "cpu", TWO, 6 * 100, "shm"),
    ("auto", "cpu", TWO, 6 * 100 - 1, "bucket"),  # the block, twice over, does not fit
    ("auto", "cpu", TWO, None, "bucket"),  # no /dev/shm
    ("auto", "cpu", TWO_NODES, BIG, "bucket"),
    ("auto", "gpu", TWO, BIG, "reducer"),
    ("flat", "gpu", TWO, BIG, "flat"),
    ("reducer", "cpu", TWO, BIG, "reducer"),
])
def test_choose(mode, kind, dist, shm_free, expected):
    assert choose(mode, kind, dist, 300, shm_free) == expected  # a block of 300 bytes must fit twice


@pytest.mark.unit
def test_shm_that_does_not_fit_is_refused_not_left_to_sigbus():
    with pytest.raises(UserError, match=r"Train.grad_sync=shm needs 1 MB free in /dev/shm, 0 MB are"):
        choose("shm", "cpu", TWO, 600_000, 1000)


@pytest.mark.unit
@pytest.mark.parametrize("overrides, message", [
    (["Train.grad_sync=nccl"], r"Train.grad_sync: unknown value 'nccl'; use one of auto, reducer, shm, bucket, flat"),
    (["Train.grad_sync=bucket", "Global.device=gpu:0,1"], r"Train.grad_sync=bucket is for CPU jobs"),
    (["Train.grad_compression=fp16"], r"Train.grad_compression=fp16 is for GPU jobs \(paddle's gloo all-reduce"),
    (["Train.grad_compression=int8"], r"Train.grad_compression: unknown value 'int8'; use one of none, bf16, fp16"),
    (["Train.grad_bucket_mb=0"], r"Train.grad_bucket_mb must be > 0"),
    (["Train.grad_sync=flat", "Global.device=gpu:0,1"], r"Train.grad_sync=flat is for CPU jobs"),
    (["Train.grad_sync=shm", "Train.dist_ips=10.0.0.1,10.0.0.2"], r"Train.grad_sync=shm needs every rank on one"),
])
def test_impossible_grad_sync_is_a_user_error(overrides, message):
    with pytest.raises(UserError, match=message):
        load(None, overrides)


@pytest.mark.unit
def test_one_table_names_the_syncs_for_the_config_the_policy_and_the_build():
    from paddledist.config.schema import GRAD_SYNC, GRAD_SYNCS

    assert GRAD_SYNC == ("auto", *GRAD_SYNCS)
    assert set(gradsync.MAKERS) == set(GRAD_SYNCS) - {"reducer"}  # the reducer wraps the model instead
    assert gradsync.NEEDS == {name: way.needs for name, way in GRAD_SYNCS.items()}
    cpu_only = sorted(n for n, way in GRAD_SYNCS.items() if way.cpu_only)
    refused = []
    for name in GRAD_SYNCS:
        with contextlib.suppress(UserError):
            load(None, [f"Train.grad_sync={name}", "Global.device=gpu:0,1"])
            continue
        refused.append(name)
    assert sorted(refused) == cpu_only == ["bucket", "flat", "shm"]


@pytest.mark.unit
def test_cpuinfo_is_read_for_vendor_and_avx2(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert cpu.cpu_vendor(str(info)) == "AuthenticAMD" and cpu.has_avx2(str(info))
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n")
    assert not cpu.has_avx2(str(info))
    assert cpu.cpu_vendor(str(tmp_path / "missing")) == "" and not cpu.has_avx2(str(tmp_path / "missing"))


@pytest.mark.unit
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


FAULTS = """
import resource, sys
import numpy as np
from paddledist.engine import cpu
print(cpu.keep_freed_memory({}) if sys.argv[1] == "keep" else {})
def step():  # a training step's worth of buffers, touched, then freed
    buffers = [np.ones(2 << 20, dtype=np.float32) for _ in range(4)]
    del buffers
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


@pytest.mark.multiproc
def test_freed_memory_is_kept_for_the_next_step_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k not in cpu.MALLOC and k != "GLIBC_TUNABLES"}
    faults = {}
    for mode in ("default", "keep"):
        out = subprocess.run([sys.executable, "-c", FAULTS, mode], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=60, check=True).stdout.split("\n")
        faults[mode] = float(out[1])
    assert out[0] == str(cpu.MALLOC)
    assert faults["default"] > 1000 > 10 > faults["keep"]  # 32 MiB faulted in again every step, or none
    assert cpu.keep_freed_memory({"MALLOC_TRIM_THRESHOLD_": "0"}) == {}
    assert cpu.keep_freed_memory({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}) == {}


def train(out: Path, *overrides: str) -> None:
    cmd = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" / "image_classification.yaml"),
           "-o", f"Global.output={out}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", "Global.model=LeNet",
           "Train.augment=False", "Train.warmup_steps=0", "Train.epochs_iters=1", "Train.batch_size=32",
           "Global.device=cpu:0,1", "Train.log_interval=5", *overrides]
    done = subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.multiproc
def test_every_sync_reaches_the_same_parameters(tmp_path):
    params, logs = {}, {}
    for mode in ("shm", "bucket", "flat", "reducer"):
        # buckets of 0.01 MB: LeNet's gradients go out in several all-reduces, from the backward thread
        train(tmp_path / mode, f"Train.grad_sync={mode}", "Train.grad_bucket_mb=0.01")
        params[mode] = paddle.load(str(tmp_path / mode / "latest" / "latest.pdparams"), return_numpy=True)
        logs[mode] = (tmp_path / mode / "logs" / "train.rank0.log").read_text()
    for mode in ("shm", "bucket", "flat"):
        assert max(float(np.abs(params[mode][k] - params["reducer"][k]).max()) for k in params[mode]) < 1e-6
        assert f"gradient sync: {mode}" in logs[mode]
        assert ("optimizer step shared" in logs[mode]) == (mode == "shm")
        assert " comm " in logs[mode] and "%" in logs[mode].split(" comm ")[1][:5]
    assert "comm (inside backward)" in logs["reducer"]


def _exchange(rank: int, world: int, path: str, piece: int, out) -> None:
    """One rank of a 3-rank job without a launcher: a real model and the shm sync over a mapped file. Rank 0
    never uses the second head (its hook never runs), rank 2 is slow, step 1 accumulates two micro-batches."""
    gradsync.ShmSync.PIECE = piece
    paddle.seed(rank)
    body, head_a, head_b = paddle.nn.Linear(8, 40), paddle.nn.Linear(40, 4), paddle.nn.Linear(40, 4)
    params = [*body.parameters(), *head_a.parameters(), *head_b.parameters()]
    f = open(path, "r+b")  # open for the whole run: ranks lock pieces through it
    sync = gradsync.ShmSync(params, DistEnv(rank, world), mmap.mmap(f.fileno(), 0), f.fileno(), timeout=60)
    opt = paddle.optimizer.Momentum(0.1, parameters=params)
    steps = []
    for step, micro in enumerate((1, 2, 1, 1, 1, 1)):
        for m in range(micro):
            x = paddle.to_tensor(np.random.default_rng(100 * step + 10 * rank + m).normal(size=(5, 8)), "float32")
            h = body(x)
            loss = head_a(h).sum() + (head_b(h).square().sum() if rank else 0)
            if rank == 2:
                time.sleep(0.2)  # arrives last: the others reduce what it has copied in meanwhile
            with sync.skip() if m + 1 < micro else contextlib.nullcontext():
                loss.backward()
        local = [np.zeros(p.shape, "float32") if p.grad is None else p.grad.numpy().copy() for p in params]
        sync()
        steps.append((local, [p.grad.numpy().copy() for p in params]))
        opt.step()
        opt.clear_grad(set_to_zero=False)
    out.put((rank, steps))


def _spawn(target, world: int, path, piece: int) -> dict:
    """Run target(rank, world, path, piece, queue) in `world` fresh processes; what each put, by rank."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, world, str(path), piece, out)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict((r, rest) for r, *rest in (out.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return results


@pytest.mark.multiproc
@pytest.mark.parametrize("piece", [16, 1 << 18])  # many pieces per parameter, and one
def test_shm_sync_averages_over_real_processes_whatever_the_arrival_order(tmp_path, piece):
    world, path = 3, tmp_path / "block"
    gradsync.ShmSync.PIECE = piece
    try:
        shapes = [paddle.nn.Linear(8, 40).weight, paddle.nn.Linear(8, 40).bias] + [
            p for _ in range(2) for p in paddle.nn.Linear(40, 4).parameters()]
        path.write_bytes(b"\0" * gradsync.block_size(shapes, world))
    finally:
        gradsync.ShmSync.PIECE = 1 << 18
    results = {r: steps for r, (steps,) in _spawn(_exchange, world, path, piece).items()}
    for step in range(6):
        mean = [sum(results[r][step][0][k] for r in range(world)) / world for k in range(6)]
        assert np.abs(mean[4]).sum() > 0 and not results[0][step][0][4].any()  # rank 0 sent zeros for head_b
        for r in range(world):
            for k in range(6):
                np.testing.assert_allclose(results[r][step][1][k], mean[k], rtol=1e-5, atol=1e-6)
                assert np.array_equal(results[r][step][1][k], results[0][step][1][k])  # bit-identical on all


def _momentum_job(seed: int):
    """A body and two heads (one parameter with its own L2 decay and half the learning rate), paddle's Momentum
    with weight decay and a learning rate that changes every update."""
    paddle.seed(seed)
    own = paddle.ParamAttr(learning_rate=0.5, regularizer=paddle.regularizer.L2Decay(1e-2))
    layers = paddle.nn.Linear(8, 40), paddle.nn.Linear(40, 4, weight_attr=own), paddle.nn.Linear(40, 4)
    params = [p for layer in layers for p in layer.parameters()]
    schedule = paddle.optimizer.lr.LambdaDecay(0.1, lambda step: 1.0 / (1 + step))
    opt = paddle.optimizer.Momentum(schedule, momentum=0.9, parameters=params,
                                    weight_decay=paddle.regularizer.L2Decay(1e-3))
    return layers, params, opt, schedule


def _velocities(opt, params) -> list[np.ndarray]:
    state = opt.state_dict()
    return [next(v.numpy() for k, v in state.items() if k.startswith(p.name + "_velocity")) for p in params]


def _shared_steps(rank: int, world: int, path: str, piece: int, out) -> None:
    """One rank of a 3-rank job whose shm sync also applies the optimizer's update; ranks start from different
    parameters (rank 0's must win), rank 0 never uses the second head, rank 2 is slow, step 1 accumulates."""
    gradsync.ShmSync.PIECE = piece
    (body, head_a, head_b), params, opt, schedule = _momentum_job(seed=rank)
    assert gradsync.SharedStep.supports(opt)
    f = open(path, "r+b")
    sync = gradsync.ShmSync(params, DistEnv(rank, world), mmap.mmap(f.fileno(), 0), f.fileno(), 60,
                            gradsync.SharedStep(opt))
    local = []
    for step, micro in enumerate((1, 2, 1, 1, 1)):
        for m in range(micro):
            x = paddle.to_tensor(np.random.default_rng(100 * step + 10 * rank + m).normal(size=(5, 8)), "float32")
            h = body(x)
            loss = head_a(h).square().sum() + (head_b(h).square().sum() if rank else 0)
            if rank == 2:
                time.sleep(0.2)
            with sync.skip() if m + 1 < micro else contextlib.nullcontext():
                loss.backward()
        local.append([np.zeros(p.shape, "float32") if p.grad is None else p.grad.numpy().copy() for p in params])
        sync()
        opt.clear_grad(set_to_zero=False)  # the trainer's order: no optimizer.step() when the sync updates
        schedule.step()
    out.put((rank, local, [p.numpy() for p in params], _velocities(opt, params)))


@pytest.mark.multiproc
@pytest.mark.compat
@pytest.mark.parametrize("piece", [16, 1 << 18])
def test_shared_optimizer_step_is_paddles_momentum_on_the_mean_gradient(tmp_path, piece):
    world, path = 3, tmp_path / "block"
    gradsync.ShmSync.PIECE = piece
    try:
        path.write_bytes(b"\0" * gradsync.block_size(_momentum_job(0)[1], world, shared_step=True))
    finally:
        gradsync.ShmSync.PIECE = 1 << 18
    results = _spawn(_shared_steps, world, path, piece)
    _, params, opt, schedule = _momentum_job(seed=0)  # the reference: rank 0's start, paddle's own step
    for step in range(5):
        for k, p in enumerate(params):
            grads = [results[r][0][step][k] for r in range(world)]
            mean = (grads[0] + grads[1] + grads[2]) * np.float32(1 / world)  # the sync's order of operations
            p._copy_gradient_from(paddle.to_tensor(mean))
        opt.step()
        opt.clear_grad(set_to_zero=False)
        schedule.step()
    for r in range(world):
        for got, want in zip(results[r][1] + results[r][2], [p.numpy() for p in params] + _velocities(opt, params)):
            assert np.array_equal(got, want)  # parameters and velocities, bit for bit, on every rank


@pytest.mark.unit
def test_shared_step_only_where_the_kernel_is_the_whole_update():
    lin = paddle.nn.Linear(3, 2)
    momentum = functools.partial(paddle.optimizer.Momentum, 0.1, parameters=lin.parameters())
    assert gradsync.SharedStep.supports(momentum(weight_decay=1e-4))
    assert not gradsync.SharedStep.supports(momentum(grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)))
    assert not gradsync.SharedStep.supports(momentum(weight_decay=paddle.regularizer.L1Decay(1e-4)))
    assert not gradsync.SharedStep.supports(momentum(), scaler=object())
    assert not gradsync.SharedStep.supports(paddle.optimizer.Adam(0.1, parameters=lin.parameters()))
    l1 = paddle.nn.Linear(3, 2, weight_attr=paddle.ParamAttr(regularizer=paddle.regularizer.L1Decay(1e-4)))
    assert not gradsync.SharedStep.supports(paddle.optimizer.Momentum(0.1, parameters=l1.parameters()))


@pytest.mark.unit
def test_shm_sync_names_the_rank_that_never_arrives(tmp_path):
    lin = paddle.nn.Linear(3, 2)
    path = tmp_path / "block"
    path.write_bytes(b"\0" * gradsync.block_size(list(lin.parameters()), 3))
    f = open(path, "r+b")
    sync = gradsync.ShmSync(list(lin.parameters()), DistEnv(0, 3), mmap.mmap(f.fileno(), 0), f.fileno(), timeout=0.3)
    sync.ready[1] = 1  # rank 1 has copied in step 1's gradients, rank 2 never will
    lin(paddle.ones([1, 3])).sum().backward()
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[2\] did not reach step 1's gradient exchange within 0.3 s"):
        sync()


@pytest.mark.unit
def test_shm_is_refused_where_its_flags_would_not_be_ordered():
    assert choose("auto", "cpu", TWO, 300, BIG, arch="aarch64") == "bucket"
    with pytest.raises(UserError, match=r"Train.grad_sync=shm needs an x86-64 CPU, this one is aarch64"):
        choose("shm", "cpu", TWO, 300, BIG, arch="aarch64")

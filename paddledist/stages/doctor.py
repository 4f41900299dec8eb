"""The doctor stage (tools/doctor.py, Global.mode=doctor): what to run first on a new cluster.

It goes the way a training job goes (config, plan, the meeting in etcd with its version, config and
port checks, paddle's launcher under the supervisor with heartbeats and the stall watchdog), and then in every
worker: the process group, one all-reduce of ALLREDUCE_MIB through paddle's collectives with its measured
bandwidth (its result checked), and STEPS training steps of Global.model on random data through the job's
gradient sync, after which every rank must hold the same parameters. The first rank of each machine prints
one line for its machine. Nothing is written to Global.output but the launcher's logs.
"""

from __future__ import annotations

import hashlib
import os
import time

from paddledist.config import Config
from paddledist.engine.distenv import DistEnv, all_gather_object, init_process_group
from paddledist.runfiles.progress import Progress
from paddledist.models import check_model_name

ALLREDUCE_MIB = 64
STEPS = 3
BATCH = 4
"""Samples per rank and step: the steps prove the training path, they do not measure it."""


def preflight(cfg: Config, dist: DistEnv, dry_run: bool = False) -> None:
    """Before the launch: the model must exist (the data is random, Global.dataset_dir is not read)."""
    check_model_name(cfg.Global.model)


def run(cfg: Config, dist: DistEnv) -> None:
    from paddledist.stages.common import set_device

    progress = Progress.from_env(os.environ, dist.rank)
    kind = set_device(cfg, dist)
    init_process_group(dist)
    seconds = all_reduce_seconds(dist, ALLREDUCE_MIB)
    progress.beat("after the all-reduce")
    losses = train_steps(cfg, dist, kind, progress)
    digests = all_gather_object(parameter_digest_of(losses.model), dist)
    if len(set(digests)) != 1:
        raise RuntimeError(f"paddledist doctor: after {STEPS} steps the ranks hold different parameters "
                           f"(digests by rank: {digests}): the gradient sync (Train.grad_sync) is broken here")
    if dist.local_rank == 0:
        print(summary(cfg, dist, seconds, losses.values), flush=True)


def all_reduce_seconds(dist: DistEnv, mib: int) -> float:
    """Seconds of one all-reduce of `mib` MiB of float32 across all ranks (after a warm-up one on connections
    gloo/NCCL open lazily); the sum is checked. 0 for a single rank."""
    if not dist.distributed:
        return 0.0
    import paddle
    import paddle.distributed as pdist

    pdist.all_reduce(paddle.ones([1024], dtype="float32"))
    tensor = paddle.full([mib * 2**20 // 4], float(dist.rank + 1), dtype="float32")
    pdist.barrier()
    start = time.perf_counter()
    pdist.all_reduce(tensor)
    seconds = time.perf_counter() - start
    expected = dist.world_size * (dist.world_size + 1) / 2
    got = {float(tensor[0]), float(tensor[-1])}
    if got != {expected}:
        raise RuntimeError(f"paddledist doctor: the all-reduce summed to {sorted(got)}, not {expected}")
    return seconds


class _Losses:
    def __init__(self, model, values: list[float]) -> None:
        self.model, self.values = model, values


def train_steps(cfg: Config, dist: DistEnv, kind: str, progress: Progress) -> _Losses:
    """STEPS updates of Global.model on random images (seeded per rank), with the job's optimizer and sync."""
    import paddle
    import paddle.nn.functional as F

    from paddledist.engine.sync import build as build_sync
    from paddledist.models import build_model
    from paddledist.models.recipe import recipe
    from paddledist.stages.train import build_optimizer

    paddle.seed(cfg.Global.seed)
    side = recipe(cfg).input_size
    model = build_model(cfg.Global.model, cfg.Train.num_classes, side)
    optimizer, scheduler = build_optimizer(cfg, dist, model, STEPS)
    model, optimizer, sync = build_sync(cfg.Train.grad_sync, model, optimizer, kind, dist, cfg.Train.heartbeat_timeout)
    paddle.seed(cfg.Global.seed + 1 + dist.rank)
    values = []
    for step in range(STEPS):
        images = paddle.randn([BATCH, 3, side, side])
        labels = paddle.randint(0, cfg.Train.num_classes, [BATCH])
        loss = F.cross_entropy(model(images), labels).mean()
        loss.backward()
        sync()
        if not sync.updates:
            optimizer.step()
        sync.clear(optimizer)
        scheduler.step()
        values.append(float(loss))
        progress.beat(f"after doctor step {step + 1}/{STEPS}")
    sync.close()
    return _Losses(model, values)


def parameter_digest_of(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()[:16]


def summary(cfg: Config, dist: DistEnv, seconds: float, losses: list[float]) -> str:
    """This machine's line: the all-reduce's algorithm and bus bandwidth (nccl-tests' terms), the steps."""
    per_node = dist.world_size // max(dist.nnodes, 1)
    node = dist.rank // max(per_node, 1)
    ips = cfg.Train.dist_ips or ()
    where = f"node {node} ({ips[node]})" if node < len(ips) else f"node {node}"
    if seconds > 0:
        size = ALLREDUCE_MIB * 2**20
        algbw = size / seconds / 1e9
        busbw = algbw * 2 * (dist.world_size - 1) / dist.world_size
        reduce = (f"all-reduce of {ALLREDUCE_MIB} MiB across {dist.world_size} ranks in {seconds * 1e3:.0f} ms: "
                  f"{algbw:.3f} GB/s (bus bandwidth {busbw:.3f} GB/s)")
    else:
        reduce = "one rank: no all-reduce"
    steps = " ".join(f"{v:.3f}" for v in losses)
    return (f"paddledist doctor: {where} OK: {per_node} rank(s) here, world size {dist.world_size}; {reduce}; "
            f"{STEPS} training steps of {cfg.Global.model} on random data (loss {steps}), parameters equal on "
            "every rank")

"""What every in-process stage needs: the process group value, logging, devices, datasets, weights."""

from __future__ import annotations

import logging
import os
import sys
from typing import Mapping

from paddledist.config.device import PADDLE_DEVICE
from paddledist.config import Config, parse_device
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError


def dist_from_env(env: Mapping[str, str]) -> DistEnv:
    """The value paddle.distributed.launch (or a platform) describes in its worker variables."""
    return DistEnv(rank=int(env.get("PADDLE_TRAINER_ID", 0)), world_size=int(env.get("PADDLE_TRAINERS_NUM", 1)),
                   local_rank=int(env.get("PADDLE_LOCAL_RANK", env.get("PADDLE_RANK_IN_NODE", 0))),
                   nnodes=int(env.get("PADDLE_NNODES", 1)))


def setup_logging(output: str, stage: str, dist: DistEnv) -> None:
    """Console on every rank (the launcher keeps one workerlog per rank) and a per-rank file in output/logs."""
    os.makedirs(os.path.join(output, "logs"), exist_ok=True)
    fmt = logging.Formatter(f"[%(asctime)s rank{dist.rank}] %(message)s", "%H:%M:%S")
    logger = logging.getLogger("paddledist")
    logger.handlers.clear()
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    console = logging.StreamHandler(sys.stdout)
    console.setLevel(logging.INFO)  # DEBUG (e.g. the stack of a broken collective) goes to the file only
    for handler in (console, logging.FileHandler(os.path.join(output, "logs", f"{stage}.rank{dist.rank}.log"))):
        handler.setFormatter(fmt)
        logger.addHandler(handler)


def check_device(cfg: Config) -> None:
    """A card device needs a paddle build for that card; checked before anything is launched or written (paddle
    is imported for card jobs only)."""
    kind = parse_device(cfg.Global.device).kind
    if kind == "cpu":
        return
    import paddle

    if not _paddle_has(paddle, kind):
        build = "paddlepaddle-gpu" if kind == "gpu" else f"a paddle build (or custom-device plugin) for {kind}"
        raise UserError(f"Global.device={cfg.Global.device} but this paddle build has no {kind.upper()} support; "
                        f"install {build} or use -o Global.device=cpu")


def _paddle_has(paddle, kind: str) -> bool:
    if kind == "gpu":
        return paddle.is_compiled_with_cuda() or paddle.is_compiled_with_rocm()
    if kind == "dcu":
        return paddle.is_compiled_with_rocm()
    if kind == "xpu":
        return paddle.is_compiled_with_xpu()
    return kind in paddle.device.get_all_custom_device_type()  # npu, mlu: paddle's custom-device plugins


def set_device(cfg: Config, dist: DistEnv) -> str:
    import paddle

    check_device(cfg)
    spec = parse_device(cfg.Global.device)
    if spec.accelerator:
        # Under the launcher each worker sees its own card as FLAGS_selected_<kind>s; alone, use the first listed id.
        name = PADDLE_DEVICE.get(spec.kind, spec.kind)
        device = name if dist.distributed else f"{name}:{spec.ids[0]}"
    else:
        device = "cpu"
    paddle.set_device(device)
    return spec.kind


def check_labels(samples, num_classes: int, where: str) -> None:
    """Every label within [0, Train.num_classes), naming the first offending sample."""
    bad = [(samples.names[i], int(v)) for i, v in enumerate(samples.labels) if not 0 <= v < num_classes]
    if bad:
        name, value = bad[0]
        raise UserError(f"{where}: {len(bad)} label(s) outside [0, Train.num_classes={num_classes}), first: {name} "
                        f"has label {value}; fix the list or set -o Train.num_classes=...")


def best_weights(cfg: Config) -> str:
    """The train stage's best model, the default weights for evaluate and export."""
    return os.path.join(cfg.Global.output, "best_model", "best_model.pdparams")

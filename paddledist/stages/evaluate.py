"""The evaluate stage: top-1/top-5 of Evaluate.weight_path on the validation split, on one or many processes.

Each rank evaluates a disjoint, unpadded shard and the counts are summed over ranks, so the numbers
equal a single-process run exactly. Rank 0 reads the weights (they may exist on the first machine only)
and shares them; rank 0 writes `<Global.output>/evaluate_result.json`.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Iterable, TextIO

from paddledist import report
from paddledist.config import Config
from paddledist.data.formats import check_files, load_samples
from paddledist.engine.distenv import DistEnv, broadcast_object, init_process_group
from paddledist.runfiles.results import write_json
from paddledist.errors import UserError
from paddledist.models import check_model_name
from paddledist.progressbar import Meter
from paddledist.models.recipe import recipe
from paddledist.stages import weights
from paddledist.stages.common import check_labels, set_device, setup_logging

log = logging.getLogger("paddledist")
RESULT = "evaluate_result.json"


def preflight(cfg: Config, dist: DistEnv, dry_run: bool = False):
    """Model name, validation data and (rank 0) the weight file, before anything is written."""
    check_model_name(cfg.Global.model)
    val = load_samples(cfg.Global.dataset_dir, "val", cfg.Global.seed, cfg.Global.allow_outside_paths)
    check_files(val)
    if len(val) == 0:
        raise UserError(f"{cfg.Global.dataset_dir}: the val split is empty; evaluate needs validation samples")
    check_labels(val, cfg.Train.num_classes, cfg.Global.dataset_dir)
    return val, weights.read(cfg, "Evaluate", dist, dry_run)


def run(cfg: Config, dist: DistEnv) -> None:
    from paddledist.data.pipeline import EvalBatchSampler, ImageDataset, Transform, make_loader
    from paddledist.engine.metrics import evaluate

    val, params = preflight(cfg, dist)
    set_device(cfg, dist)
    init_process_group(dist)
    model = weights.build(cfg, broadcast_object(params, dist), "Evaluate")
    setup_logging(cfg.Global.output, "evaluate", dist)
    path, _ = weights.resolve(cfg, "Evaluate")
    if dist.is_main:
        log.info("evaluating %s on %d validation samples over %d process(es)", path, len(val), dist.world_size)
    t = cfg.Train
    dataset = ImageDataset(val, Transform.of(recipe(cfg), False, False))
    loader = make_loader(dataset, EvalBatchSampler(len(dataset), t.batch_size, dist.world_size, dist.rank),
                         t.num_workers)
    m = evaluate(model, logged(loader, cfg.Evaluate.log_interval), dist, confusion=True)
    if m["undecodable"]:
        log.warning("%d validation sample(s) could not be decoded and were left out", m["undecodable"])
    log.info("evaluate: top1 %.4f top5 %.4f loss %.4f on %d samples", m["top1"], m["top5"], m["loss"], m["num_samples"])
    if dist.is_main:
        write_json(os.path.join(cfg.Global.output, RESULT), result(cfg, dist, path, m))
        log.info("evaluate: report %s", report.write(cfg.Global.output))


def logged(loader, interval: int, out: TextIO = sys.stdout) -> Iterable:
    """The loader with its progress: a bar on a terminal, else a log line every `interval` batches
    (Evaluate.log_interval) and at the end."""
    total = len(loader)
    meter = Meter(out, total, "evaluate", unit="batch")
    try:
        for i, batch in enumerate(loader, 1):
            if meter.bar is None and (i % interval == 0 or i == total):
                log.info("eval iter %d/%d", i, total)
            meter.update(1)
            yield batch
    finally:
        meter.close()


def result(cfg: Config, dist: DistEnv, path: str, m: dict) -> dict:
    """evaluate_result.json: PaddleX's done_flag and metrics, plus the plain numbers and what was evaluated."""
    return {
        "done_flag": True, "model_name": cfg.Global.model, "weight_path": path, "dataset_dir": cfg.Global.dataset_dir,
        "top1": m["top1"], "top5": m["top5"], "loss": m["loss"], "num_samples": m["num_samples"],
        "undecodable": m["undecodable"], "world_size": dist.world_size,
        "metrics": {"val.top1": m["top1"], "val.top5": m["top5"]},
        "confusion": m["confusion"],  # [true label, top-1 prediction, count] of every non-zero cell (the report's)
    }

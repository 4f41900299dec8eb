"""Result files, written atomically by global rank 0: train_result.json in PaddleX's shape plus our fields.

PaddleX's shape (what its tooling reads, PaddleClas's update_train_results writes): model_name, label_dict,
train_log, visualdl_log (vdl_log when VisualDL wrote one, else ""), config, done_flag, and models.last_1..last_5
(the newest epoch_N checkpoints first) and models.best, each with its score and file paths relative to Global.output.
The same content is also written as
train_results.json, the spelling PaddleClas's code uses.
"""

from __future__ import annotations

import json
import os

from paddledist.fsio import atomic_write

VDL_LOG = "vdl_log"
"""VisualDL's scalars under Global.output (PaddleX's folder name)."""
REPORT = "report.html"


def write_json(path: str, data) -> None:
    atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False))


LAST_NUM = 5
NAMES = ("train_result.json", "train_results.json")


def model_entry(name: str, score, inference: bool, pir: bool) -> dict:
    """One models.* entry: score and the checkpoint's (and its inference model's) paths under Global.output."""
    entry = {"score": score, **{k: f"{name}/{name}.{k}" for k in ("pdparams", "pdopt", "pdstates")}}
    if inference:
        files = {"inference_config": "inference.yml", "pdmodel": "inference.json" if pir else "inference.pdmodel",
                 "pdiparams": "inference.pdiparams"}
        if not pir:
            files["pdiparams.info"] = "inference.pdiparams.info"
        entry.update({k: f"{name}/inference/{v}" for k, v in files.items()})
    return entry


def _models(t) -> dict:
    s, cfg = t.state, t.cfg
    inference, pir = t.inference_pir is not None, bool(t.inference_pir)
    kept = min(LAST_NUM, cfg.Train.max_epoch_checkpoints or LAST_NUM)  # older epoch_N folders are gone
    saved = [h for h in s.history if h["epoch"] % cfg.Train.save_interval == 0][::-1][:kept]
    models = {f"last_{i}": {} for i in range(1, LAST_NUM + 1)}
    for i, h in enumerate(saved, 1):
        models[f"last_{i}"] = model_entry(f"epoch_{h['epoch']}", h.get("top1"), inference, pir)
    models["best"] = model_entry("best_model", s.best_top1, inference, pir) if s.best_epoch else {}
    return models


def global_batch(cfg, world_size: int) -> int:
    """Samples per update: per-rank batch x ranks x accumulation steps."""
    return cfg.Train.batch_size * world_size * cfg.Train.accum_steps


def write_train_result(t, done: bool) -> None:
    s, cfg = t.state, t.cfg
    best = {"epoch": s.best_epoch, "top1": s.best_top1 if s.best_epoch else None,
            "pdparams": "best_model/best_model.pdparams" if s.best_epoch else None}
    data = {
        "model_name": cfg.Global.model, "label_dict": "label_dict.txt",
        "train_log": f"logs/train.rank{t.dist.rank}.log", "config": "config.yaml",
        "visualdl_log": VDL_LOG if os.path.isdir(os.path.join(cfg.Global.output, VDL_LOG)) else "",
        "models": _models(t), "done_flag": done,
        # paddledist's own fields
        "world_size": t.dist.world_size,
        "global_batch_size": global_batch(cfg, t.dist.world_size),
        "start_epoch": s.start_epoch, "epochs": cfg.Train.epochs_iters, "best": best, "history": s.history,
        "bad_sample_count": len(s.bad_samples), "bad_samples": s.bad_samples,
        "restarts": t.restarts, "machine": t.machine, "confusion": t.confusion,
        "report": REPORT if done else "",
    }
    for name in NAMES:
        write_json(os.path.join(cfg.Global.output, name), data)

"""Result files, written atomically by global rank 0: train_result.json in PaddleX's shape plus our fields."""

from __future__ import annotations

import json
import os

from paddledist.fsio import atomic_write


def write_json(path: str, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False))


def _paths(name: str) -> dict:
    return {k: f"{name}/{name}.{k}" for k in ("pdparams", "pdopt", "pdstates")}


def write_train_result(t, done: bool) -> None:
    s, cfg = t.state, t.cfg
    last = s.history[-1] if s.history else {}
    best = {"epoch": s.best_epoch, "top1": s.best_top1 if s.best_epoch else None,
            "pdparams": "best_model/best_model.pdparams" if s.best_epoch else None}
    models = {"last_1": {"score": last.get("top1"), **_paths("latest")}}
    if s.best_epoch:
        models["best"] = {"score": s.best_top1, **_paths("best_model")}
    data = {
        "model_name": cfg.Global.model, "done_flag": done, "world_size": t.dist.world_size,
        "global_batch_size": cfg.Train.batch_size * t.dist.world_size * cfg.Train.accum_steps,
        "start_epoch": s.start_epoch, "epochs": cfg.Train.epochs_iters, "best": best, "history": s.history,
        "bad_sample_count": len(s.bad_samples), "bad_samples": s.bad_samples,
        "config": "config.yaml", "label_dict": "label_dict.txt",
        "train_log": f"logs/train.rank{t.dist.rank}.log", "models": models,
    }
    write_json(os.path.join(cfg.Global.output, "train_result.json"), data)

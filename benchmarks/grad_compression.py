"""What Train.grad_compression=bf16 does to training: the same short run with fp32 and with bf16 gradients on
the wire, against the spread between two fp32 runs that differ only in their seed.

    python benchmarks/grad_compression.py                 # ResNet18 on dataset/digits, 2 ranks, ~5 min here
    python benchmarks/grad_compression.py --epochs 2 --model LeNet   # a smoke run

Each run: tools/train.py with 2 CPU ranks on one machine, Train.grad_sync=bucket (the cross-machine path: the
all-reduce is the same on loopback as over a link), batch 32 per rank. Reported per run: top-1 and loss of every
epoch (train_result.json), and the largest parameter difference to the fp32 run of the same seed. The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from bench_procs import ROOT, free_port_range, run

RUNS = {"fp32": ("none", 7), "bf16": ("bf16", 7), "fp32, seed 8": ("none", 8)}


def train(out: str, args, compression: str, seed: int) -> dict:
    argv = [sys.executable, os.path.join(ROOT, "tools", "train.py"), "-c",
            os.path.join(ROOT, "configs", "image_classification.yaml"), "-o", f"Global.output={out}",
            f"Global.dataset_dir={os.path.join(ROOT, 'dataset', 'digits')}", f"Global.model={args.model}",
            "Global.device=cpu:0,1", f"Global.seed={seed}", f"Train.epochs_iters={args.epochs}",
            "Train.batch_size=32", "Train.grad_sync=bucket", f"Train.grad_compression={compression}",
            f"Train.port={free_port_range()}", "Train.uniform_output_enabled=false",
            f"Train.save_interval={args.epochs}"]
    run(argv, dict(os.environ), 1800)
    with open(os.path.join(out, "train_result.json"), encoding="utf-8") as f:
        history = json.load(f)["history"]
    return {"top1": [round(h["top1"], 4) for h in history], "loss": [round(h["train_loss"], 4) for h in history]}


def params(out: str) -> dict:
    import paddle

    return paddle.load(os.path.join(out, "latest", "latest.pdparams"), return_numpy=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="ResNet18")
    p.add_argument("--epochs", type=int, default=5)
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="paddledist-compression-")
    results = {"model": args.model, "epochs": args.epochs, "load": [os.getloadavg()]}
    try:
        for name, (compression, seed) in RUNS.items():
            results[name] = train(os.path.join(tmp, str(len(results))), args, compression, seed)
            results[name]["out"] = os.path.join(tmp, str(len(results) - 1))
            print(name, results[name], flush=True)
        ref = params(results["fp32"].pop("out"))
        for name in ("bf16", "fp32, seed 8"):
            other = params(results[name].pop("out"))
            results[name]["max_param_diff_to_fp32"] = float(max(np.abs(ref[k] - other[k]).max() for k in ref))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load"].append(os.getloadavg())
    print(json.dumps(results))


if __name__ == "__main__":
    main()

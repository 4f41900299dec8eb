"""The baseline a user would write: a minimal fleet data-parallel loop, none of paddledist's launcher, trainer
or data pipeline; only the network comes from paddledist's registry (`--model`, default ResNet18, PaddleClas's
definition), so that this loop and a paddledist job train the same model.

    python benchmarks/bare_fleet.py --steps 30                                  # one process
    python -m paddle.distributed.launch --nproc_per_node 2 benchmarks/bare_fleet.py --steps 30   # 2 CPU ranks
    python -m paddle.distributed.launch --devices 0,1 benchmarks/bare_fleet.py --device gpu       # 2 GPUs

Data: random tensors made once (`--data synthetic`, pure compute), or a ClsDataset folder read with PIL in a
plain paddle.io.DataLoader. Rank 0 prints one JSON line: images/s over the steps after `--warmup`, and the
seconds from BENCH_T0 (the benchmark's command start, epoch seconds) to the end of the first step.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import paddle
import paddle.nn.functional as F
from PIL import Image
from paddle.distributed import fleet

from paddledist.models import build_model


class Folder(paddle.io.Dataset):
    """ClsDataset train.txt: `path label` per line; images resized to 32x32, scaled to [0, 1]."""

    def __init__(self, root: str, size: int) -> None:
        super().__init__()
        with open(os.path.join(root, "train.txt"), encoding="utf-8") as f:
            self.rows = [(os.path.join(root, p), int(y)) for p, y in (line.split() for line in f if line.strip())]
        self.size = size

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        path, label = self.rows[i]
        with Image.open(path) as img:
            hwc = np.asarray(img.convert("RGB").resize((self.size, self.size)), dtype=np.float32) / 255.0
        return hwc.transpose(2, 0, 1), np.int64(label)


def batches(args, rank: int, world: int):
    if args.data == "synthetic":
        rng = np.random.default_rng(rank)
        x = paddle.to_tensor(rng.standard_normal((args.batch_size, 3, args.size, args.size), dtype=np.float32))
        y = paddle.to_tensor(rng.integers(0, 10, args.batch_size))
        while True:
            yield x, y
    dataset = Folder(args.data, args.size)
    sampler = paddle.io.DistributedBatchSampler(dataset, args.batch_size, num_replicas=world, rank=rank,
                                                shuffle=True, drop_last=True)
    loader = paddle.io.DataLoader(dataset, batch_sampler=sampler, num_workers=args.num_workers)
    while True:
        yield from loader


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="ResNet18", help="a paddledist registry name (the job's own network)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--data", default="synthetic")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    t0 = float(os.environ.get("BENCH_T0", time.time()))
    world, rank = int(os.environ.get("PADDLE_TRAINERS_NUM", 1)), int(os.environ.get("PADDLE_TRAINER_ID", 0))
    paddle.set_device(args.device)
    if world > 1:
        fleet.init(is_collective=True)
    paddle.seed(0)
    # The network only (paddledist's definition, so (c) and (d) train the same one); the loop stays bare.
    model = build_model(args.model, 10, args.size)
    opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, parameters=model.parameters(),
                                    weight_decay=1e-4)
    if world > 1:
        model, opt = fleet.distributed_model(model), fleet.distributed_optimizer(opt)
    data = batches(args, rank, world)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        x, y = next(data)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)  # as paddledist's trainer: the ceiling gets every non-communication gain
        if step == 0:
            float(loss)  # wait for the device
            first_step_s = time.time() - t0
            if rank == 0:
                print(f"first step after {first_step_s:.2f} s", flush=True)
    float(loss)
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"images_per_sec": round(args.steps * args.batch_size * world / elapsed, 2),
                          "first_step_s": round(first_step_s, 3), "world": world,
                          "threads": os.environ.get("OMP_NUM_THREADS")}), flush=True)

if __name__ == "__main__":
    main()

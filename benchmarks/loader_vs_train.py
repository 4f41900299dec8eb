"""Is the data loader fast enough? Its images/s against training's on the same cores, on JPEG data.

    python benchmarks/loader_vs_train.py --model PP-LCNet_x1_0 --quick
    python benchmarks/loader_vs_train.py --model ResNet50 --quick --workers 2

Builds a flowers-like ClsDataset (images/, train.txt, val.txt, label.txt; JPEGs of about 500x375 with smooth
colour fields, edges and grain, so they decode like photographs rather than like noise) in a temporary folder,
then measures
  (a) the loader: paddledist's own ImageDataset + the recipe's train Transform + TrainBatchSampler + make_loader
      with Train.num_workers workers, batches iterated without training (the first batch, worker start-up,
      left out);
  (b) training: forward + backward + the recipe's optimizer step of the registry's model at --size, fed one
      pre-made batch, so only compute is timed (warm-up steps left out).
The loader must be at least 3x training for the loader never to be what a run waits for. The last line is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
from PIL import Image, ImageFilter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = os.path.join(ROOT, "configs", "image_classification.yaml")
CLASSES = 5


def natural_image(rng: np.random.RandomState, width: int, height: int) -> Image.Image:
    """A photo-like picture: a smooth low-frequency colour field, a few soft blobs with edges, fine grain."""
    small = rng.randint(0, 256, (6, 8, 3)).astype(np.uint8)
    img = Image.fromarray(small).resize((width, height), Image.BICUBIC)
    arr = np.asarray(img).astype(np.int16)
    yy, xx = np.mgrid[0:height, 0:width]
    for _ in range(rng.randint(2, 6)):
        cy, cx, r = rng.randint(0, height), rng.randint(0, width), rng.randint(20, min(width, height) // 2)
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        arr[inside] = (arr[inside] * 0.4 + rng.randint(0, 256, 3) * 0.6).astype(np.int16)
    arr += rng.randint(-12, 13, arr.shape).astype(np.int16)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.8))


def make_dataset(root: str, n: int, seed: int = 0) -> str:
    """A PaddleX ClsDataset of n JPEGs (sizes around 500x375, either orientation) split 90/10."""
    rng = np.random.RandomState(seed)
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    lines = []
    for i in range(n):
        w, h = rng.randint(400, 640), rng.randint(300, 480)
        w, h = (h, w) if rng.rand() < 0.25 else (w, h)
        rel = f"images/img_{i:05d}.jpg"
        natural_image(rng, w, h).save(os.path.join(root, rel), quality=90)
        lines.append(f"{rel} {i % CLASSES}")
    cut = max(1, n * 9 // 10)
    with open(os.path.join(root, "train.txt"), "w") as f:
        f.write("\n".join(lines[:cut]) + "\n")
    with open(os.path.join(root, "val.txt"), "w") as f:
        f.write("\n".join(lines[cut:] or lines[:1]) + "\n")
    with open(os.path.join(root, "label.txt"), "w") as f:
        f.write("".join(f"{c} flower_{c}\n" for c in range(CLASSES)))
    return root


def config(args, dataset_dir: str):
    from paddledist.config.loader import load
    return load(CONFIG, [f"Global.dataset_dir={dataset_dir}", f"Global.model={args.model}",
                         f"Train.input_size={args.size}", f"Train.batch_size={args.batch}",
                         f"Train.num_workers={args.workers}", f"Train.num_classes={CLASSES}"])


def loader_rate(cfg, steps: int) -> float:
    """Images/s of the trainer's own train loader, iterated (epoch after epoch) without training."""
    from paddledist.data.formats import load_samples
    from paddledist.data.pipeline import ImageDataset, TrainBatchSampler, Transform, make_loader
    from paddledist.models.recipe import recipe

    samples = load_samples(cfg.Global.dataset_dir, "train", cfg.Global.seed)
    dataset = ImageDataset(samples, Transform.of(recipe(cfg), True, cfg.Train.augment))
    sampler = TrainBatchSampler(len(dataset), cfg.Train.batch_size, 1, 0, cfg.Global.seed)
    loader = make_loader(dataset, sampler, cfg.Train.num_workers)
    images, start, epoch = 0, None, 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            if start is None:  # worker start-up and the first decode are not the steady rate
                start = time.perf_counter()
                continue
            images += batch[0].shape[0]
            steps -= 1
            if steps <= 0:
                return images / (time.perf_counter() - start)
        epoch += 1


def train_rate(cfg, steps: int, warmup: int) -> float:
    """Images/s of forward + backward + optimizer step on one pre-made batch (compute only)."""
    import paddle

    from paddledist.engine import optim
    from paddledist.models import build_model
    from paddledist.models.recipe import recipe

    rec = recipe(cfg)
    paddle.seed(0)
    model = build_model(cfg.Global.model, CLASSES, rec.input_size)
    model.train()
    opt = optim.make_optimizer(rec, model, rec.learning_rate)
    x = paddle.randn([cfg.Train.batch_size, 3, rec.input_size, rec.input_size])
    y = paddle.randint(0, CLASSES, [cfg.Train.batch_size])
    loss_fn = paddle.nn.CrossEntropyLoss()
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        out = model(x)
        loss = loss_fn(out[0] if isinstance(out, (list, tuple)) else out, y)
        loss.backward()
        opt.step()
        opt.clear_grad()
    float(loss)  # wait for the last step
    return steps * cfg.Train.batch_size / (time.perf_counter() - start)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="PP-LCNet_x1_0")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=None, help="Train.num_workers (default: the usable cores)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed loader batches (default 30, --quick 8); training times half as many steps, at least 2")
    p.add_argument("--images", type=int, default=None, help="JPEGs to make (default 400, --quick 200)")
    p.add_argument("--quick", action="store_true", help="fewer steps and images: a few minutes on 2 cores")
    args = p.parse_args(argv)
    from paddledist.engine.cpu import usable_cpus
    args.workers = usable_cpus() if args.workers is None else args.workers
    args.steps = args.steps or (8 if args.quick else 30)
    args.images = args.images or (200 if args.quick else 400)
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    from paddledist.engine import cpu
    cpu.apply_defaults(False)  # the trainer's CPU settings, before paddle's first computation
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pd-jpeg-") as tmp:
        cfg = config(args, make_dataset(tmp, args.images))
        loader = loader_rate(cfg, args.steps)
        train = train_rate(cfg, max(2, args.steps // 2), warmup=2)
    result = {"model": args.model, "size": args.size, "batch": args.batch, "workers": args.workers,
              "loader_images_per_sec": round(loader, 1), "train_images_per_sec": round(train, 2),
              "ratio": round(loader / train, 2), "cpus": os.cpu_count(),
              "load_avg_1m_start": round(load[0], 2), "load_avg_1m_end": round(os.getloadavg()[0], 2)}
    print(f"| {'model':16} | size | batch | workers | loader img/s | train img/s | ratio |")
    print(f"| {args.model:16} | {args.size:4} | {args.batch:5} | {args.workers:7} | {loader:12.1f} | {train:11.2f} "
          f"| {loader / train:5.2f} |")
    print(f"load average (1 min) {result['load_avg_1m_start']} at start, {result['load_avg_1m_end']} at end "
          f"on {result['cpus']} CPUs (other processes share these cores)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

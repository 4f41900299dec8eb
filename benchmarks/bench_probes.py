"""The scaling benchmark's probes, each run in a child process of its own (`scaling.py --probe NAME`): the
machine's GEMM rate, the model's FLOPs per image, the loader's images/s; and the PNG folder the real-data runs read."""

from __future__ import annotations

import os
import time


def probe_gemm() -> dict:
    """GFLOP/s of a 1024^3 float32 matrix product on one thread: numpy (OpenBLAS) and paddle (mklml)."""
    import numpy as np
    import paddle

    n, reps = 1024, 10
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    pa, pb = paddle.to_tensor(a), paddle.to_tensor(b)
    rates = {}
    for name, fn in (("numpy", lambda: a @ b), ("paddle", lambda: paddle.matmul(pa, pb).numpy())):
        fn()
        start = time.process_time()
        for _ in range(reps):
            fn()
        rates[name] = round(2 * n ** 3 * reps / (time.process_time() - start) / 1e9, 1)
    return rates


def probe_flops(model_name: str, size: int) -> dict:
    """Multiply-adds of one forward pass (convolutions and linear layers), counted with forward hooks."""
    import numpy as np
    import paddle

    from paddledist.models import build_model

    model, macs = build_model(model_name, 10, size), [0]

    def hook(layer, inputs, output):
        weight = layer.weight
        per_output = int(np.prod(weight.shape[1:])) if isinstance(layer, paddle.nn.Conv2D) else weight.shape[0]
        macs[0] += int(np.prod(output.shape)) * per_output

    for layer in model.sublayers():
        if isinstance(layer, (paddle.nn.Conv2D, paddle.nn.Linear)):
            layer.register_forward_post_hook(hook)
    model.eval()
    model(paddle.zeros([1, 3, size, size]))
    return {"forward_macs": macs[0], "train_flops": 6 * macs[0]}  # forward 2 x MACs; backward about twice that


def probe_loader(data: str, batch_size: int, batches: int) -> dict:
    """paddledist's training loader (decode, augment, normalise, collate) in the main process, as trainers run it."""
    from paddledist.data.formats import load_samples
    from paddledist.data.pipeline import ImageDataset, TrainBatchSampler, Transform, make_loader

    samples = load_samples(data, "train")
    dataset = ImageDataset(samples, Transform(32, True, True))
    sampler = TrainBatchSampler(len(dataset), batch_size, 1, 0, 0)
    sampler.set_epoch(1)
    loader, seen, start = make_loader(dataset, sampler, 0), 0, None
    while seen < batches * batch_size:
        for i, batch in enumerate(loader):
            if start is None:
                start, seen = time.perf_counter(), -batch_size  # the first batch is warm-up
            seen += batch[0].shape[0]
            if seen >= batches * batch_size:
                break
    return {"images_per_sec": round(seen / (time.perf_counter() - start), 1)}


def make_png_folder(root: str, n: int, classes: int = 10) -> str:
    """A ClsDataset of n random 32x32 PNGs (train.txt, val.txt, label.txt, images/)."""
    import numpy as np
    from PIL import Image

    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        label = i % classes
        image = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(image).save(os.path.join(root, "images", f"{i}.png"))
        lines.append(f"images/{i}.png {label}\n")
    with open(os.path.join(root, "train.txt"), "w") as f:
        f.writelines(lines)
    with open(os.path.join(root, "val.txt"), "w") as f:
        f.writelines(lines[: max(1, n // 8)])
    with open(os.path.join(root, "label.txt"), "w") as f:
        f.writelines(f"{k} class{k}\n" for k in range(classes))
    return root

"""Top-k counting and exact distributed evaluation (disjoint shards, counts summed over ranks)."""

from __future__ import annotations

import numpy as np
import paddle

from paddledist.data.pipeline import OK
from paddledist.engine.distenv import DistEnv, all_reduce_sum


def topk_correct(logits: np.ndarray, labels: np.ndarray, k: int) -> int:
    k = min(k, logits.shape[1])
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return int((top == labels[:, None]).any(axis=1).sum())


@paddle.no_grad()
def evaluate(model: paddle.nn.Layer, loader, dist: DistEnv) -> dict:
    """top1, top5, loss and num_samples over the whole validation set, each sample counted once."""
    was_training = model.training
    model.eval()
    sums = np.zeros(5)  # correct@1, correct@5, samples, loss sum, undecodable
    for images, labels, status, _ in loader:
        ok = status.numpy() == OK
        logits = model(images)
        loss = paddle.nn.functional.cross_entropy(logits, labels, reduction="none").numpy().reshape(-1)
        logits, labels_np = logits.numpy()[ok], labels.numpy()[ok]
        sums += [topk_correct(logits, labels_np, 1), topk_correct(logits, labels_np, 5), ok.sum(),
                 loss[ok].sum(), (~ok).sum()]
    if was_training:
        model.train()
    c1, c5, n, loss_sum, bad = all_reduce_sum(sums, dist)
    d = max(n, 1.0)
    return {"top1": c1 / d, "top5": c5 / d, "loss": loss_sum / d, "num_samples": int(n), "undecodable": int(bad)}

"""Top-k counting and exact distributed evaluation (disjoint shards, counts summed over ranks)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import paddle

from paddledist.data.pipeline import OK
from paddledist.engine.distenv import DistEnv, all_gather_object, all_reduce_sum


def topk_correct(logits: np.ndarray, labels: np.ndarray, k: int) -> int:
    k = min(k, logits.shape[1])
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return int((top == labels[:, None]).any(axis=1).sum())


def count_pairs(pairs: Counter, labels: np.ndarray, predicted: np.ndarray) -> None:
    pairs.update(zip(labels.tolist(), predicted.tolist()))


def merge_pairs(per_rank: list) -> list[list[int]]:
    """[label, predicted, count] over all ranks, sorted: the non-zero cells of the confusion matrix (sparse, so
    a 1000-class job sends and keeps only the cells its samples filled)."""
    total: Counter = Counter()
    for pairs in per_rank:
        total.update(pairs)
    return [[a, b, n] for (a, b), n in sorted(total.items())]


@paddle.no_grad()
def evaluate(model: paddle.nn.Layer, loader, dist: DistEnv, confusion: bool = False) -> dict:
    """top1, top5, loss and num_samples over the whole validation set, each sample counted once; with
    `confusion`, also its confusion counts ([label, top-1 prediction, count] for every non-zero cell)."""
    was_training = model.training
    model.eval()
    sums, pairs = np.zeros(5), Counter()  # correct@1, correct@5, samples, loss sum, undecodable
    for images, labels, status, _ in loader:
        ok = status.numpy() == OK
        logits = model(images)
        loss = paddle.nn.functional.cross_entropy(logits, labels, reduction="none").numpy().reshape(-1)
        logits, labels_np = logits.numpy()[ok], labels.numpy()[ok].reshape(-1)
        sums += [topk_correct(logits, labels_np, 1), topk_correct(logits, labels_np, 5), ok.sum(),
                 loss[ok].sum(), (~ok).sum()]
        if confusion:
            count_pairs(pairs, labels_np, logits.argmax(axis=1))
    if was_training:
        model.train()
    c1, c5, n, loss_sum, bad = all_reduce_sum(sums, dist)
    d = max(n, 1.0)
    result = {"top1": c1 / d, "top5": c5 / d, "loss": loss_sum / d, "num_samples": int(n), "undecodable": int(bad)}
    if confusion:
        result["confusion"] = merge_pairs(all_gather_object(dict(pairs), dist))
    return result

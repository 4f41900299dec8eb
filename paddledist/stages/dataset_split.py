"""CheckDataset.split: re-split a ClsDataset's train+val lists with a fixed seed, keeping the originals.

Per class, the samples (sorted by path) are shuffled with Global.seed and the first train_percent
go to train.txt, the rest to val.txt (a class of one sample stays in train). The same dataset, seed and
percentages always give the same lists, so running the split again changes nothing; every machine of a
job splits its copy identically. Before a list is replaced, the original is copied to
`<list>.bak-<YYYYmmdd-HHMMSS>` next to it; the new list is written to a temporary file and renamed.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Optional

import numpy as np

from paddledist.data.formats import read_list
from paddledist.fsio import atomic_write

LISTS = ("train", "val")


def assign(rows: list[tuple[str, int]], train_percent: int, seed: int) -> tuple[list, list]:
    """Pure: (train rows, val rows), stratified per label, each sorted by path."""
    by_label: dict[int, list] = {}
    for rel, label in sorted(rows):
        by_label.setdefault(label, []).append((rel, label))
    rng = np.random.RandomState(seed)
    train, val = [], []
    for label in sorted(by_label):
        group = by_label[label]
        order = rng.permutation(len(group))
        k = round(len(group) * train_percent / 100)
        k = min(max(k, 1), len(group) - 1) if len(group) > 1 else 1
        train += [group[i] for i in order[:k]]
        val += [group[i] for i in order[k:]]
    return sorted(train), sorted(val)


def resplit(dataset_dir: str, train_percent: int, seed: int) -> Optional[dict]:
    """Rewrite train.txt and val.txt; returns what changed (None when the lists already are that split)."""
    rows = [(rel, int(label)) for name in LISTS for _, rel, label in read_list(dataset_dir, name)]
    train, val = assign(rows, train_percent, seed)
    texts = {"train": _text(train), "val": _text(val)}
    paths = {name: os.path.join(dataset_dir, f"{name}.txt") for name in LISTS}
    if all(_read(paths[name]) == texts[name] for name in LISTS):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backups = {name: _backup(paths[name], stamp) for name in LISTS}
    for name in LISTS:
        atomic_write(paths[name], texts[name])
    return {"train_percent": train_percent, "val_percent": 100 - train_percent, "seed": seed,
            "train_samples": len(train), "val_samples": len(val), "backups": backups}


def _text(rows: list) -> str:
    return "".join(f"{rel} {label}\n" for rel, label in rows)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _backup(path: str, stamp: str) -> str:
    target, n = f"{path}.bak-{stamp}", 1
    while os.path.exists(target):
        n += 1
        target = f"{path}.bak-{stamp}-{n}"
    shutil.copy2(path, target)
    return target



"""Dataset formats, recognised from the folder layout: PaddleX ClsDataset, CIFAR-10 python batches, synthetic.

Each format yields a `Samples` value: how to read sample i as an HWC uint8 array, and its label.
Images are decoded lazily; decode failures raise `DecodeError` for the caller to count.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image

from paddledist.errors import UserError

SYNTHETIC = "synthetic"
"""`Global.dataset_dir: synthetic` (or `synthetic:N`) selects random data of CIFAR size, for benchmarks."""


class DecodeError(Exception):
    """A listed sample exists in the list but its image cannot be read or decoded."""


@dataclass
class Samples:
    labels: np.ndarray
    """int64 label per sample."""
    read: Callable[[int], np.ndarray]
    """Sample i as an HWC uint8 array; raises DecodeError."""
    names: list[str]
    """A printable name per sample (file path and line, or batch and row)."""
    label_names: list[str]

    def __len__(self) -> int:
        return len(self.labels)


def detect_format(dataset_dir: str) -> str:
    if dataset_dir == SYNTHETIC or dataset_dir.startswith(SYNTHETIC + ":"):
        return SYNTHETIC
    if not os.path.isdir(dataset_dir):
        raise UserError(f"Global.dataset_dir: folder not found: {dataset_dir} (set -o Global.dataset_dir=PATH)")
    if os.path.isdir(os.path.join(dataset_dir, "cifar-10-batches-py")) or os.path.isfile(os.path.join(dataset_dir, "data_batch_1")):
        return "cifar10"
    if os.path.isfile(os.path.join(dataset_dir, "train.txt")) or os.path.isfile(os.path.join(dataset_dir, "val.txt")):
        return "cls"
    raise UserError(f"Global.dataset_dir: {dataset_dir} is neither a ClsDataset (train.txt, val.txt, label.txt, images/) "
                    "nor a CIFAR-10 batches folder (cifar-10-batches-py/)")


def load_samples(dataset_dir: str, split: str, seed: int = 0) -> Samples:
    fmt = detect_format(dataset_dir)
    if fmt == SYNTHETIC:
        return _synthetic(dataset_dir, split, seed)
    if fmt == "cifar10":
        return _cifar10(dataset_dir, split)
    return _cls(dataset_dir, split)


def read_list(dataset_dir: str, split: str) -> list[tuple[int, str, str]]:
    """ClsDataset `<split>.txt` as (line number, relative path, label text); paths may not hold spaces."""
    path = os.path.join(dataset_dir, f"{split}.txt")
    if not os.path.isfile(path):
        raise UserError(f"{path}: split list missing (a ClsDataset needs train.txt and val.txt)")
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise UserError(f"{path}:{lineno}: expected 'path label', got {line.strip()!r}")
            rows.append((lineno, parts[0], parts[1]))
    return rows


def read_label_names(dataset_dir: str) -> list[str]:
    path = os.path.join(dataset_dir, "label.txt")
    if not os.path.isfile(path):
        return []
    names = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, name = line.strip().partition(" ")
            if key.isdigit():
                names[int(key)] = name.strip() or key
    return [names.get(i, str(i)) for i in range(max(names) + 1)] if names else []


def _cls(dataset_dir: str, split: str) -> Samples:
    rows = read_list(dataset_dir, split)
    list_file = os.path.join(dataset_dir, f"{split}.txt")
    labels = []
    for lineno, _, label in rows:
        if not label.lstrip("-").isdigit():
            raise UserError(f"{list_file}:{lineno}: label {label!r} is not an integer")
        labels.append(int(label))
    paths = [os.path.join(dataset_dir, rel) for _, rel, _ in rows]
    names = [f"{list_file}:{lineno} {rel}" for lineno, rel, _ in rows]
    return Samples(np.asarray(labels, dtype=np.int64), lambda i: decode_image(paths[i]), names,
                   read_label_names(dataset_dir))


def decode_image(path: str) -> np.ndarray:
    """An image file as an HWC uint8 RGB array."""
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise DecodeError(f"{path}: {e}") from None


def _cifar10(dataset_dir: str, split: str) -> Samples:
    root = os.path.join(dataset_dir, "cifar-10-batches-py")
    root = root if os.path.isdir(root) else dataset_dir
    files = [f"data_batch_{k}" for k in range(1, 6)] if split == "train" else ["test_batch"]
    images, labels = [], []
    for name in files:
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            raise UserError(f"CIFAR-10 batch missing: {path}")
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")  # the dataset's own format; trusted local files only
        images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels.extend(batch[b"labels"])
    data = np.concatenate(images)
    return Samples(np.asarray(labels, dtype=np.int64), lambda i: data[i], [f"{split}[{i}]" for i in range(len(data))],
                   _cifar_label_names(root))


def _cifar_label_names(root: str) -> list[str]:
    path = os.path.join(root, "batches.meta")
    if not os.path.isfile(path):
        return [str(i) for i in range(10)]
    with open(path, "rb") as f:
        meta = pickle.load(f, encoding="bytes")
    return [name.decode() for name in meta[b"label_names"]]


def _synthetic(spec: str, split: str, seed: int, num_classes: int = 10) -> Samples:
    _, _, count = spec.partition(":")
    n = int(count) if count.isdigit() else 2048
    n = n if split == "train" else max(1, n // 8)
    rng = np.random.RandomState(seed + (0 if split == "train" else 1))
    labels = rng.randint(0, num_classes, size=n).astype(np.int64)
    data = rng.randint(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return Samples(labels, lambda i: data[i], [f"synthetic[{i}]" for i in range(n)], [str(k) for k in range(num_classes)])

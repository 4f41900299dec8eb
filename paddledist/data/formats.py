"""Dataset formats, recognised from the folder layout: PaddleX ClsDataset, CIFAR-10 python batches, synthetic.

Each format yields a `Samples` value: how to read sample i as an HWC uint8 array, and its label.
Images are decoded lazily; decode failures raise `DecodeError` for the caller to count.
"""

from __future__ import annotations

import os
import pickle
import re
import stat
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from PIL import Image

from paddledist.config.safeload import MAX_LIST_BYTES, read_text
from paddledist.errors import UserError

LABEL = re.compile(r"-?[0-9]{1,9}", re.ASCII)
"""A label as a list may write it: ASCII digits, at most 9 (`²` or a 20-digit number is a mistake, not a class)."""
MAX_CLASSES = 1 << 20
"""Class ids in label.txt (the same bound as Train.num_classes)."""
MAX_SYNTHETIC = 200_000
"""Samples of `synthetic:N` (each 3 KiB in memory)."""

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
    paths: Optional[list[str]] = None
    """The file behind each sample, for formats that read files (checked up front by `check_files`)."""

    def __len__(self) -> int:
        return len(self.labels)


def detect_format(dataset_dir: str) -> str:
    if dataset_dir == SYNTHETIC or dataset_dir.startswith(SYNTHETIC + ":"):
        return SYNTHETIC
    if not os.path.isdir(dataset_dir):
        raise UserError(f"Global.dataset_dir: folder not found: {dataset_dir} (set -o Global.dataset_dir=PATH)")
    if os.path.isdir(os.path.join(dataset_dir, "cifar-10-batches-py")) or \
            os.path.isfile(os.path.join(dataset_dir, "data_batch_1")):
        return "cifar10"
    if os.path.isfile(os.path.join(dataset_dir, "train.txt")) or os.path.isfile(os.path.join(dataset_dir, "val.txt")):
        return "cls"
    raise UserError(f"Global.dataset_dir: {dataset_dir} is neither a ClsDataset (train.txt, val.txt, label.txt, "
                    "images/) nor a CIFAR-10 batches folder (cifar-10-batches-py/)")


def load_samples(dataset_dir: str, split: str, seed: int = 0, allow_outside: bool = False) -> Samples:
    """A split's samples; list entries must stay inside `dataset_dir` unless `allow_outside`
    (Global.allow_outside_paths)."""
    fmt = detect_format(dataset_dir)
    if fmt == SYNTHETIC:
        return _synthetic(dataset_dir, split, seed)
    if fmt == "cifar10":
        return _cifar10(dataset_dir, split)
    return _cls(dataset_dir, split, allow_outside)


def is_int_label(text: str) -> bool:
    return LABEL.fullmatch(text) is not None


def outside(rel: str) -> bool:
    """A list entry that leaves its dataset folder: absolute, or climbing out with `..`."""
    norm = os.path.normpath(rel)
    return os.path.isabs(rel) or norm == ".." or norm.startswith(".." + os.sep)


def check_files(samples: Samples) -> None:
    """Every listed file is reachable and a regular file, before training starts: an unreadable folder would
    otherwise surface as an epoch of decode failures, and a FIFO would block the reader."""
    for name, path in zip(samples.names, samples.paths or ()):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue  # a missing image is a decode failure, counted against Train.max_bad_samples
        except OSError as e:
            raise UserError(f"{name}: cannot reach {path}: {e.strerror} (check the permissions of "
                            f"{os.path.dirname(path)})") from None
        if not stat.S_ISREG(mode):
            raise UserError(f"{name}: {path} is not a regular file (a FIFO, device or folder); list image files only")


def read_list(dataset_dir: str, split: str) -> list[tuple[int, str, str]]:
    """ClsDataset `<split>.txt` as (line number, relative path, label text); paths may not hold spaces."""
    path = os.path.join(dataset_dir, f"{split}.txt")
    if not os.path.isfile(path):
        raise UserError(f"{path}: split list missing (a ClsDataset needs train.txt and val.txt)")
    rows = []
    for lineno, line in enumerate(read_text(path, f"the {split} list", MAX_LIST_BYTES).split("\n"), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise UserError(f"{path}:{lineno}: expected 'path label', got {line.strip()[:200]!r}")
        rows.append((lineno, parts[0], parts[1]))
    return rows


def read_label_names(dataset_dir: str) -> list[str]:
    path = os.path.join(dataset_dir, "label.txt")
    if not os.path.isfile(path):
        return []
    names = {}
    for lineno, line in enumerate(read_text(path, "label.txt").split("\n"), 1):
        key, _, name = line.strip().partition(" ")
        if is_int_label(key) and not key.startswith("-"):
            if int(key) >= MAX_CLASSES:
                raise UserError(f"{path}:{lineno}: class id {key} is past the {MAX_CLASSES} classes allowed")
            names[int(key)] = name.strip() or key
    return [names.get(i, str(i)) for i in range(max(names) + 1)] if names else []


def _cls(dataset_dir: str, split: str, allow_outside: bool = False) -> Samples:
    rows = read_list(dataset_dir, split)
    list_file = os.path.join(dataset_dir, f"{split}.txt")
    labels = []
    for lineno, rel, label in rows:
        if not is_int_label(label):
            raise UserError(f"{list_file}:{lineno}: label {label[:40]!r} is not an integer of at most 9 digits")
        if not allow_outside and outside(rel):
            raise UserError(f"{list_file}:{lineno}: {rel[:200]!r} is outside the dataset folder; list paths relative "
                            "to it, or set -o Global.allow_outside_paths=true if you mean it")
        labels.append(int(label))
    paths = [os.path.join(dataset_dir, rel) for _, rel, _ in rows]
    names = [f"{list_file}:{lineno} {rel}" for lineno, rel, _ in rows]
    return Samples(np.asarray(labels, dtype=np.int64), lambda i: decode_image(paths[i]), names,
                   read_label_names(dataset_dir), paths)


def decode_image(path: str) -> np.ndarray:
    """An image file as an HWC uint8 RGB array."""
    try:
        # O_NONBLOCK and the mode check: a FIFO listed as an image would block the reader for ever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DecodeError(f"{path}: not a regular file")
            with Image.open(f) as img:
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
    n = int(count) if count.isascii() and count.isdigit() else 2048
    if not 0 < n <= MAX_SYNTHETIC:
        raise UserError(f"Global.dataset_dir={spec}: give between 1 and {MAX_SYNTHETIC} synthetic samples")
    n = n if split == "train" else max(1, n // 8)
    rng = np.random.RandomState(seed + (0 if split == "train" else 1))
    labels = rng.randint(0, num_classes, size=n).astype(np.int64)
    data = rng.randint(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    names = [f"synthetic[{i}]" for i in range(n)]
    return Samples(labels, lambda i: data[i], names, [str(k) for k in range(num_classes)])


def read_label_dict(path: str) -> list[str]:
    """The class names of a run's label_dict.txt ("<id> <name>" lines) by id, the id itself where a line is
    missing; [] without the file."""
    if not os.path.isfile(path):
        return []
    found = {}
    for line in read_text(path, "label_dict.txt").split("\n"):
        key, _, name = line.partition(" ")
        if is_int_label(key) and not key.startswith("-") and int(key) < MAX_CLASSES:
            found[int(key)] = name or key
    return [found.get(i, str(i)) for i in range(max(found, default=-1) + 1)]

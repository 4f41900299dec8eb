"""What the machines of one job must agree on, as small digests every machine compares at the meeting in etcd.

- config: every resolved key except the per-machine ones (PER_NODE), one digest per key, so a mismatch
  names the key;
- data: the dataset's lists (ClsDataset train.txt/val.txt/label.txt contents; CIFAR-10 batch file sizes;
  the synthetic spec), one entry per file, so a mismatch names the file;
- versions: paddledist (version and a digest of its source), paddle (the installed distribution).

No paddle import: paddle's version comes from the installed distribution's metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
from typing import Any

import paddledist
from paddledist.config import Config

PER_NODE = frozenset({
    "Global.output",  # each machine may write its own disk
    "Global.dataset_dir",  # the path may differ; its contents are compared under "data"
    "Train.node_ip",  # names this machine
    "Train.job_secret_file",  # each machine's own copy of the secret; the secret itself secures the job's etcd
    "Train.resume_path", "Train.pretrain_weight_path",  # read on the first machine only and broadcast
})
"""Keys allowed to differ between machines."""

PADDLE_DISTRIBUTIONS = ("paddlepaddle-gpu", "paddlepaddle")
CLS_LISTS = ("train.txt", "val.txt", "label.txt")
CIFAR_FILES = tuple(f"data_batch_{k}" for k in range(1, 6)) + ("test_batch", "batches.meta")


def fingerprint(cfg: Config) -> dict:
    return {"versions": versions(), "config": config_digests(cfg), "data": data_digests(cfg.Global.dataset_dir)}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def flat_config(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """`Section.key` -> value, nested sections flattened."""
    flat = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            flat.update(flat_config(value, f"{prefix}{f.name}."))
        else:
            flat[prefix + f.name] = value
    return flat


def config_digests(cfg: Config) -> dict[str, list[str]]:
    """key -> [digest, short text for messages], per-machine keys left out."""
    out = {}
    for key, value in flat_config(cfg).items():
        if key in PER_NODE:
            continue
        text = json.dumps(value, sort_keys=True, default=str)
        out[key] = [_digest(text.encode()), text if len(text) <= 80 else text[:77] + "..."]
    return out


def data_digests(dataset_dir: str) -> dict[str, str]:
    """file -> digest (lists) or size (CIFAR batches); "missing" for an absent file."""
    if dataset_dir == "synthetic" or dataset_dir.startswith("synthetic:"):
        return {"synthetic": dataset_dir}
    cifar = os.path.join(dataset_dir, "cifar-10-batches-py")
    if os.path.isdir(cifar) or os.path.isfile(os.path.join(dataset_dir, "data_batch_1")):
        root = cifar if os.path.isdir(cifar) else dataset_dir
        return {name: _size(os.path.join(root, name)) for name in CIFAR_FILES}
    return {name: _file_digest(os.path.join(dataset_dir, name)) for name in CLS_LISTS}


def _size(path: str) -> str:
    try:
        return f"{os.path.getsize(path)} bytes"
    except OSError:
        return "missing"


def _file_digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "sha256 " + _digest(f.read())
    except OSError:
        return "missing"


def versions() -> dict[str, str]:
    return {"paddledist": f"{paddledist.__version__} (source {source_digest()})", "paddle": paddle_version()}


def source_digest() -> str:
    """Digest of paddledist's .py files: machines running different code stop before training."""
    root = os.path.dirname(os.path.abspath(paddledist.__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:12]


def paddle_version() -> str:
    for dist in PADDLE_DISTRIBUTIONS:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def differences(mine: dict, theirs: dict) -> list[str]:
    """Human lines for every difference, versions first, then config keys, then data files."""
    lines = []
    for key in sorted(set(mine.get("versions", {})) | set(theirs.get("versions", {}))):
        a, b = mine.get("versions", {}).get(key), theirs.get("versions", {}).get(key)
        if a != b:
            lines.append(f"{key} {b} there, {a} on node 0 (install the same version everywhere)")
    cfg_a, cfg_b = mine.get("config", {}), theirs.get("config", {})
    for key in sorted(set(cfg_a) | set(cfg_b)):
        a, b = cfg_a.get(key, ["", "(absent)"]), cfg_b.get(key, ["", "(absent)"])
        if a[0] != b[0]:
            lines.append(f"config key {key} is {b[1]} there, {a[1]} on node 0")
    data_a, data_b = mine.get("data", {}), theirs.get("data", {})
    for name in sorted(set(data_a) | set(data_b)):
        a, b = data_a.get(name, "(absent)"), data_b.get(name, "(absent)")
        if a != b:
            lines.append(f"dataset file {name} is {b} there, {a} on node 0")
    return lines

"""Checkpoints in PaddleX's layout, published atomically.

`<output>/epoch_N/epoch_N.pdparams|.pdopt|.pdstates`, and `latest/` and `best_model/` likewise. Each
checkpoint is written complete into a hidden temporary folder first. `epoch_N` is then renamed into
place; `latest` and `best_model` are symbolic links swapped with one atomic rename onto a versioned
folder under `.checkpoints/`, so a kill at any moment leaves the previous complete checkpoint.
Checkpoint files are pickles: load them only from paths you trust.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Optional

from paddledist.errors import UserError

STORE = ".checkpoints"


@dataclass
class Checkpoint:
    params: dict
    opt: Optional[dict]
    states: Optional[dict]


def save(output: str, name: str, params: dict, opt: dict, states: dict, link: bool) -> str:
    """Write `<name>/<name>.*` under `output`; returns the .pdparams path. `link`: publish via symlink swap."""
    import paddle

    tag = f"{name}.epoch{states['epoch']}" if link else name
    tmp = os.path.join(output, STORE, f".tmp-{tag}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    paddle.save(params, os.path.join(tmp, f"{name}.pdparams"))
    paddle.save(opt, os.path.join(tmp, f"{name}.pdopt"))
    paddle.save(states, os.path.join(tmp, f"{name}.pdstates"))
    _fsync_dir(tmp)
    if link:
        _publish_link(output, name, tmp, tag)
    else:
        _publish_dir(output, name, tmp)
    return os.path.join(output, name, f"{name}.pdparams")


def _publish_dir(output: str, name: str, tmp: str) -> None:
    final = os.path.join(output, name)
    if os.path.islink(final) or os.path.isfile(final):
        os.remove(final)
    elif os.path.isdir(final):
        shutil.rmtree(final)
    os.rename(tmp, final)


def _publish_link(output: str, name: str, tmp: str, tag: str) -> None:
    store = os.path.join(output, STORE)
    versioned = os.path.join(store, tag)
    shutil.rmtree(versioned, ignore_errors=True)
    os.rename(tmp, versioned)
    final = os.path.join(output, name)
    previous = os.path.realpath(final) if os.path.islink(final) else None
    if os.path.isdir(final) and not os.path.islink(final):
        shutil.rmtree(final)  # a plain folder from an older tool: replaced once, then always a link
    staged = os.path.join(output, f".{name}.link-{os.getpid()}")
    if os.path.lexists(staged):
        os.remove(staged)
    os.symlink(os.path.join(STORE, tag), staged)
    os.replace(staged, final)  # the atomic step
    if previous and previous != os.path.realpath(versioned) and previous.startswith(os.path.realpath(store)):
        shutil.rmtree(previous, ignore_errors=True)


def _fsync_dir(path: str) -> None:
    for name in os.listdir(path):
        with open(os.path.join(path, name), "rb") as f:
            os.fsync(f.fileno())


def load(pdparams: str, what: str) -> Checkpoint:
    """Load `x.pdparams` and, when present, its `x.pdopt` and `x.pdstates` siblings."""
    if not os.path.isfile(pdparams):
        raise UserError(f"{what}: file not found: {pdparams}; point it at an existing .pdparams file "
                        "(e.g. <Global.output>/latest/latest.pdparams) or set it to null")
    params = _load_file(pdparams, what)
    if not isinstance(params, dict) or not params or not all(hasattr(v, "shape") for v in params.values()):
        raise UserError(f"{what}: {pdparams} is not a paddle checkpoint (a .pdparams state dict of tensors); "
                        "point it at a .pdparams file saved by paddledist, PaddleX or paddle.save")
    stem = pdparams[: -len(".pdparams")] if pdparams.endswith(".pdparams") else pdparams
    opt = _load_file(stem + ".pdopt", what) if os.path.isfile(stem + ".pdopt") else None
    states = _load_file(stem + ".pdstates", what) if os.path.isfile(stem + ".pdstates") else None
    return Checkpoint(params, opt, states)


def _load_file(path: str, what: str) -> Any:
    import paddle

    try:
        return paddle.load(path, return_numpy=True)
    except Exception as e:  # paddle raises many types for a file that is not its format
        raise UserError(f"{what}: {path} is not a paddle checkpoint or is damaged ({type(e).__name__}); point it "
                        "at a complete file saved by paddledist, PaddleX or paddle.save") from None

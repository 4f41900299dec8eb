"""Checkpoints in PaddleX's layout, published atomically.

`<output>/epoch_N/epoch_N.pdparams|.pdopt|.pdstates|.info.json` (and `inference/` with
Train.uniform_output_enabled), and `latest/` and `best_model/` likewise. Each
checkpoint is written complete into a hidden temporary folder first (and only the newest Train.max_epoch_checkpoints
epoch_N are kept: prune_epochs renames older ones aside, then deletes them). `epoch_N` is then renamed into
place; `latest` and `best_model` are symbolic links swapped with one atomic rename onto a versioned
folder under `.checkpoints/`, so a kill at any moment leaves the previous complete checkpoint (a test
SIGKILLs a writer at random points of save() and loads `latest` every time). The next save removes what a
killed writer left behind. Checkpoint files are pickles: load them only from paths you trust (docs/security.md).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Optional

from paddledist.errors import UserError
from paddledist.fsio import fsync_path, guarded, remove

STORE = ".checkpoints"


@dataclass
class Checkpoint:
    params: dict
    opt: Optional[dict]
    states: Optional[dict]
    path: str = ""
    """The local file it was read from (a URL's cached download)."""
    fit: Any = None
    """Pretrained weights: what loads, what is replaced and ignored (stages.weights.Fit), set by the preflight."""


def save(output: str, name: str, params: dict, opt: dict, states: dict, link: bool,
         extra: Optional[Callable[[str, str], None]] = None) -> str:
    """Write `<name>/<name>.*` under `output`; returns the .pdparams path. `link`: publish via symlink swap.
    `extra(folder, name)` adds files (info.json, inference/) to the unpublished folder, so they appear with it."""
    import paddle

    store = os.path.join(output, STORE)
    tmp = os.path.join(store, f".tmp-{name}-{os.getpid()}")
    # A failed write (disk full...) leaves what was published before; what it wrote goes at once, to free the space.
    with guarded(os.path.join(output, name), nbytes((params, opt, states)), lambda: _clean_after_failure(output)):
        os.makedirs(store, exist_ok=True)
        _remove_leftovers(output)
        remove(tmp)
        os.makedirs(tmp)
        for suffix, obj in (("pdparams", params), ("pdopt", opt), ("pdstates", states)):
            paddle.save(obj, os.path.join(tmp, f"{name}.{suffix}"))
        if extra is not None:
            extra(tmp, name)
        _fsync_files(tmp)
        if link:
            _publish_link(output, name, tmp, _free_tag(store, f"{name}.epoch{states['epoch']}"))
        else:
            _publish_dir(output, name, tmp)
    return os.path.join(output, name, f"{name}.pdparams")


def nbytes(obj: Any) -> int:
    """About what paddle.save writes for `obj`: the bytes of its arrays and tensors (nested dicts, lists)."""
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    if hasattr(obj, "nbytes"):
        return int(obj.nbytes)
    if hasattr(obj, "numel") and hasattr(obj, "element_size"):
        return int(obj.numel()) * int(obj.element_size())
    return 0


def _clean_after_failure(output: str) -> None:
    """Remove this writer's partial folders and links (never a published checkpoint); never raises."""
    try:
        _remove_leftovers(output)
    except OSError:
        pass


def _free_tag(store: str, tag: str) -> str:
    """`tag`, or `tag.2`, `tag.3`... when taken: a folder in the store may be the published one (a rerun
    reaching the same epoch), and deleting it before the swap would leave the link dangling."""
    candidate, n = tag, 1
    while os.path.lexists(os.path.join(store, candidate)):
        n += 1
        candidate = f"{tag}.{n}"
    return candidate


def _publish_dir(output: str, name: str, tmp: str) -> None:
    """epoch_N: the old folder is moved aside first, so a kill leaves the old or the new one, or (between two
    renames) neither; never a half-written one."""
    final = os.path.join(output, name)
    aside = os.path.join(output, STORE, f".old-{name}-{os.getpid()}")
    if os.path.lexists(final):
        os.rename(final, aside)
    os.rename(tmp, final)
    _fsync_dir(output)
    if os.path.islink(aside) or os.path.isfile(aside):
        os.remove(aside)
    else:
        shutil.rmtree(aside, ignore_errors=True)


def _publish_link(output: str, name: str, tmp: str, tag: str) -> None:
    store = os.path.join(output, STORE)
    versioned = os.path.join(store, tag)
    os.rename(tmp, versioned)
    final = os.path.join(output, name)
    previous = os.path.realpath(final) if os.path.islink(final) else None
    if os.path.isdir(final) and not os.path.islink(final):  # a plain folder from an older tool: once
        os.rename(final, os.path.join(store, f".old-{name}-{os.getpid()}"))
    staged = os.path.join(output, f".{name}.link-{os.getpid()}")
    if os.path.lexists(staged):
        os.remove(staged)
    os.symlink(os.path.join(STORE, tag), staged)
    os.replace(staged, final)  # the atomic step
    _fsync_dir(output)
    if previous and previous != os.path.realpath(versioned) and os.path.dirname(previous) == os.path.realpath(store):
        shutil.rmtree(previous, ignore_errors=True)


def prune_epochs(output: str, current: int, keep: Optional[int]) -> None:
    """Delete the epoch_N folders (N <= current) older than the newest `keep` (None keeps all). Each is renamed
    aside first, so a kill never leaves a half-deleted epoch_N that looks like a checkpoint."""
    if keep is None:
        return
    epochs = sorted(n for n in (_epoch_of(e) for e in os.listdir(output)) if n is not None and n <= current)
    for n in epochs[:-keep]:
        aside = os.path.join(output, STORE, f".old-epoch_{n}-{os.getpid()}")
        os.rename(os.path.join(output, f"epoch_{n}"), aside)
        shutil.rmtree(aside, ignore_errors=True)


def _epoch_of(entry: str) -> Optional[int]:
    number = entry[len("epoch_"):] if entry.startswith("epoch_") else ""
    return int(number) if number.isdigit() else None


def _remove_leftovers(output: str) -> None:
    """What a killed writer left: temporary and set-aside folders, staged links, and store folders no link
    points to any more. Only rank 0 writes an output folder, so nothing here is in use."""
    store = os.path.join(output, STORE)
    published = {os.path.realpath(os.path.join(output, n)) for n in os.listdir(output)
                 if os.path.islink(os.path.join(output, n))}
    for entry in os.listdir(store):
        path = os.path.join(store, entry)
        if os.path.realpath(path) not in published:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    for entry in os.listdir(output):
        if entry.startswith(".") and ".link-" in entry and os.path.islink(os.path.join(output, entry)):
            os.remove(os.path.join(output, entry))


def _fsync_files(path: str) -> None:
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full):
            _fsync_files(full)
            continue
        fsync_path(full)
    _fsync_dir(path)


def _fsync_dir(path: str) -> None:
    """Make renames in `path` durable (a power cut after the swap must not bring back the old link)."""
    fsync_path(path)


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
    return Checkpoint(params, opt, states, path=pdparams)


def _load_file(path: str, what: str) -> Any:
    import paddle

    try:
        return paddle.load(path, return_numpy=True)
    except Exception as e:  # paddle raises many types for a file that is not its format
        raise UserError(f"{what}: {path} is not a paddle checkpoint or is damaged ({type(e).__name__}); point it "
                        "at a complete file saved by paddledist, PaddleX or paddle.save") from None

"""Every file under Global.output is written here: complete into a temporary name beside it, fsynced, renamed
into place (atomic on POSIX), the folder fsynced. A reader or a kill sees the old file or the new one, never
half of one. Any OSError (disk full, quota, I/O) removes the partial files and becomes one OutputWriteError
naming the path, the space the write needed and what is free."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Union

from paddledist.errors import OutputWriteError


def temp_name(path: str) -> str:
    """A hidden sibling of `path`: same folder (so the rename stays on one file system), this process's id."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.tmp-{os.getpid()}")


def free_bytes(path: str) -> Optional[int]:
    """Free space on the file system holding `path` (or its nearest existing parent); None if unknown."""
    probe = os.path.abspath(path)
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def human(n: Optional[int]) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def write_failure(path: str, needed: Optional[int], error: OSError) -> OutputWriteError:
    reason = error.strerror or str(error)
    return OutputWriteError(
        f"cannot write {os.path.abspath(path)}: {reason} (needs about {human(needed)}, "
        f"{human(free_bytes(path))} free there); "
        "the partial files are removed and the previous files kept; free space or set -o Global.output=<a "
        "folder with room>, then rerun (resume from <Global.output>/latest/latest.pdparams)")


def remove(path: str) -> None:
    """Remove a file, link or folder tree if present; never raises (it runs while handling another error)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)
    except OSError:
        pass


@contextmanager
def guarded(path: str, needed: Optional[int] = None, cleanup: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Run a write of `path`; on an OSError run `cleanup` (remove the partial files) and raise OutputWriteError."""
    try:
        yield
    except OSError as e:
        cleanup()
        raise write_failure(path, needed, e) from e
    except BaseException:
        cleanup()
        raise


def fsync_path(path: str) -> None:
    """Flush a written file (or a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str, needed: Optional[int] = None) -> Iterator[str]:
    """Yield a temporary file name for a writer that takes a path (paddle.save, PIL's save); on success it is
    fsynced and renamed onto `path`; on failure it is removed and an OSError becomes OutputWriteError."""
    tmp = temp_name(path)
    with guarded(path, needed, lambda: remove(tmp)):
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(os.path.dirname(os.path.abspath(path)))


def atomic_write(path: str, data: Union[str, bytes], mode: Optional[int] = None) -> None:
    """Write `data` (text as UTF-8) to `path` atomically; with `mode`, the file has it before it has the name."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path, len(raw)) as tmp:
        with open(tmp, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(raw)

"""URL -> cached local file: `resolve(path_or_url, key)`, used for weight files and predict inputs.

A URL is downloaded once per machine into `$PADDLEDIST_HOME/downloads` (default ~/.cache/paddledist): the
first process takes an exclusive lock on `<file>.lock` and downloads, the others block on the lock and
then find the file. The download goes into a temporary file in the same folder, is fsynced and renamed
into place, so a killed download never leaves a partial file under the final name. A cached file is used
as it is, without asking the server again. Failures (offline, bad URL, HTTP error, cut-off transfer) are
one line naming the URL and how to pass a local file instead (UserError, exit code 2).
Imports nothing heavy: the launching process resolves URLs before any worker starts.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional, TextIO

from paddledist.errors import UserError
from paddledist.fsio import fsync_path
from paddledist.progressbar import Meter, is_terminal

TIMEOUT_S = 30.0
"""Connect/read timeout of one download: a silent server fails the job instead of hanging it."""
CHUNK = 1 << 20


def home() -> str:
    """The cache root: PADDLEDIST_HOME, else ~/.cache/paddledist."""
    return os.environ.get("PADDLEDIST_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "paddledist")


def is_url(value: Optional[str]) -> bool:
    return isinstance(value, str) and value.lower().startswith(("http://", "https://"))


def cached_path(url: str) -> str:
    """Where `url` is cached: the file's own name, prefixed by a hash of the whole URL (two servers may
    serve different files under one name)."""
    name = os.path.basename(urllib.parse.urlsplit(url).path) or "download"
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]
    return os.path.join(home(), "downloads", f"{digest}-{name}")


def resolve(path_or_url: str, key: str, dry_run: bool = False, out: Optional[TextIO] = None) -> str:
    """A local path as it is; a URL as its cached file, downloaded first if needed (one process per machine).
    `dry_run`: download nothing, say what would be downloaded, and return where it would be cached."""
    if not is_url(path_or_url):
        return path_or_url
    target = cached_path(path_or_url)
    if os.path.isfile(target):
        return target
    if dry_run:
        print(f"paddledist: dry run: {key}: would download {path_or_url} -> {target}", file=out or sys.stdout,
              flush=True)
        return target
    _prepare(target, path_or_url, key)
    with open(target + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here while one process downloads
        try:
            if not os.path.isfile(target):
                _download(path_or_url, target, key, out or sys.stderr)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _how(url: str, key: str) -> str:
    return (f"download it on a machine with access and pass the local file (-o {key}=/path/to/file), "
            f"or put it at {cached_path(url)}")


def _prepare(target: str, url: str, key: str) -> None:
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
    except OSError as e:
        raise UserError(f"{key}: cannot create the download cache {os.path.dirname(target)} for {url} "
                        f"({e.strerror}); set PADDLEDIST_HOME to a writable folder or {_how(url, key)}") from None


def _download(url: str, target: str, key: str, out: TextIO) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                _fetch(url, f, out)
            except urllib.error.HTTPError as e:
                raise UserError(f"{key}: cannot download {url}: HTTP {e.code} {e.reason}; {_how(url, key)}") from None
            except (urllib.error.URLError, OSError, ValueError) as e:
                reason = getattr(e, "reason", None) or e
                raise UserError(f"{key}: cannot download {url} ({reason}); {_how(url, key)}") from None
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_path(os.path.dirname(target))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _fetch(url: str, f, out: TextIO) -> None:
    """Copy the response body into `f`: a progress bar on a terminal, else a line every 10 s; then one line."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        total = int(response.headers.get("Content-Length") or 0)
        start = time.monotonic()
        meter = _meter(url, total, out)
        try:
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                f.write(chunk)
                meter.update(len(chunk))
        finally:
            meter.close()
        if total and meter.done != total:
            raise OSError(f"transfer ended after {meter.done} of {total} bytes")
        out.write(f"paddledist: downloaded {url}: {meter.done / 2**20:.1f} MiB in {time.monotonic() - start:.1f} s\n")
        out.flush()


def _meter(url: str, total: int, out: TextIO) -> Meter:
    of = f" of {total / 2**20:.1f}" if total else ""
    if not is_terminal(out):
        out.write(f"paddledist: downloading {url}{f' ({total / 2**20:.1f} MiB)' if total else ''}\n")
        out.flush()
    return Meter(out, total, "downloading", lambda done: f"paddledist: downloading {url}: {done / 2**20:.1f}{of} MiB",
                 unit="B", unit_scale=True, unit_divisor=1024)

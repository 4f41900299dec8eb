"""A folder's files and their contents, to show nothing on disk changed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def snapshot(root: Path) -> dict:
    """path -> (kind, size, mtime_ns, content digest or link target), links not followed."""
    found = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if os.path.islink(path):
                what = ("link", os.readlink(path))
            elif os.path.isdir(path):
                what = ("dir", None)
            else:
                what = ("file", hashlib.sha256(Path(path).read_bytes()).hexdigest())
            found[os.path.relpath(path, root)] = (*what, st.st_size, st.st_mtime_ns)
    return found

"""The paddle versions the code is tested with. engine/gradsync.py calls paddle's private `_C_ops.momentum_`
and reads optimizer internals (`_momentum`, `_use_nesterov`...), which change between minor releases without
notice, so setup.py pins the same range and every command checks it first (from package metadata: importing
paddle here would cost the launching process ~1.3 s)."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Optional

from paddledist.errors import UserError

TESTED = ((3, 3), (3, 4))
"""Lowest tested (major, minor), and the first untested one above it."""
REQUIREMENT = f"paddlepaddle>={TESTED[0][0]}.{TESTED[0][1]},<{TESTED[1][0]}.{TESTED[1][1]}"
DISTS = ("paddlepaddle", "paddlepaddle-gpu")


def installed_version() -> Optional[str]:
    for dist in DISTS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def in_range(version: str) -> bool:
    match = re.match(r"(\d+)\.(\d+)", version)
    return bool(match) and TESTED[0] <= (int(match[1]), int(match[2])) < TESTED[1]


def check(version: Optional[str] = None) -> None:
    """UserError when the installed paddle is outside TESTED (nothing installed: paddle's import says so)."""
    version = version or installed_version()
    if version is not None and not in_range(version):
        low, high = TESTED
        raise UserError(f"paddle {version} is installed but paddledist is tested with paddle >={low[0]}.{low[1]},"
                        f"<{high[0]}.{high[1]} (it uses paddle's private _C_ops); install "
                        f"'{REQUIREMENT}' (or the paddlepaddle-gpu build of that range)")

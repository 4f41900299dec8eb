"""The latest checkpoint's progress as the supervisor reads it for its restart records."""

from __future__ import annotations

import os
from typing import Optional

from paddledist.config.safeload import read_json
from paddledist.errors import UserError


def latest_progress(output: str) -> Optional[dict]:
    """{"epoch", "step_in_epoch"} of <output>/latest (its info.json), or None without one (on this machine)."""
    path = os.path.join(output, "latest", "latest.info.json")
    try:
        info = read_json(path, "the latest checkpoint's info") if os.path.exists(path) else None
    except UserError:  # bounded like every JSON the tool reads: a damaged file is no progress, not a crash
        return None
    if not isinstance(info, dict):
        return None
    return {"epoch": info.get("epoch", 0), "step_in_epoch": info.get("step_in_epoch", 0)}

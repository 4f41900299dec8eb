"""Which paddle is installed, read from package metadata before anything imports it (importing paddle costs the
launching process ~1 s, and a machine without paddle must hear how to get it in well under that).

paddledist declares no paddle build, as PaddleX and PaddleOCR do: the CPU build comes with the `cpu` extra, a
GPU build from PaddlePaddle's own index for the machine's CUDA version. Every paddle 3.x release is supported;
one newer than the newest tested runs after a warning, and what relies on paddle's internals checks itself
(paddledist/paddle_internals/) instead of the whole tool refusing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from typing import Optional

from paddledist.errors import UserError

SUPPORTED = ((3, 0), (3, 3))
"""The oldest supported (major, minor) and the newest tested one; the `cpu` extra spans them."""
CPU_REQUIREMENT = f"paddlepaddle>={SUPPORTED[0][0]}.{SUPPORTED[0][1]},<{SUPPORTED[1][0]}.{SUPPORTED[1][1] + 1}"
"""What `pip install "paddledist[cpu]"` installs (setup.py's extra; a test keeps the two equal)."""
DISTS = ("paddlepaddle", "paddlepaddle-gpu")
GPU_INDEX = "https://www.paddlepaddle.org.cn/packages/stable/{cuda}/"
"""PaddlePaddle's own package index of 3.x GPU builds, one folder per CUDA version (PyPI's paddlepaddle-gpu
stops at 2.6.2). The current list of folders per release: https://www.paddlepaddle.org.cn/install/quick."""
GPU_EXAMPLE = "pip install paddlepaddle-gpu==3.3.1 -i " + GPU_INDEX.format(cuda="cu126")
WARNED = "PADDLEDIST_NEWER_PADDLE_WARNED"
"""Set once the newer-paddle warning was printed, so a job's launcher and workers say it once, not per rank."""


def installed_version() -> Optional[str]:
    """The installed paddle build's version; "" for a paddle without metadata (a source build); None: none."""
    for dist in DISTS:
        version = dist_version(dist)
        if version is not None:
            return version
    return "" if importlib.util.find_spec("paddle") is not None else None


def minor(version: str) -> Optional[tuple[int, int]]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def missing_message() -> str:
    return ("paddle is not installed: for CPU training run pip install \"paddledist[cpu]\"; for NVIDIA GPUs install "
            f"the paddlepaddle-gpu 3.x build for your CUDA version from PaddlePaddle's index, e.g. {GPU_EXAMPLE} "
            "(cu118, cu126, cu129...: the list per release is at https://www.paddlepaddle.org.cn/install/quick)")


def check() -> None:
    """The installed paddle, judged before any command does anything else."""
    judge(installed_version(), os.environ)


def judge(version: Optional[str], environ) -> None:
    """UserError without paddle or with one older than 3.0; one warning for a minor newer than the newest tested
    (`environ` remembers it was given, and workers inherit that)."""
    if version is None:
        raise UserError(missing_message())
    found = minor(version)
    if found is None:  # a source build without metadata, or a version string of its own: let it run
        return
    low, high = SUPPORTED
    if found < low:
        raise UserError(f"paddle {version} is installed; paddledist needs paddle {low[0]}.{low[1]} or newer: "
                        f"pip install \"paddledist[cpu]\", or the paddlepaddle-gpu 3.x build ({GPU_EXAMPLE})")
    if found > high and not environ.get(WARNED):
        environ[WARNED] = "1"
        print(f"paddledist: warning: paddle {version} is newer than the newest tested ({high[0]}.{high[1]}); it "
              f"runs, and each path that relies on paddle's internals checks itself first", file=sys.stderr,
              flush=True)


PROTOBUF_7_FROM = (3, 3, 1)
"""The first paddle whose fleet reads protobuf 7's field descriptors: protobuf 7 removed FieldDescriptor.label,
which fleet.init reads in paddle 3.0.0 to 3.3.0 (AttributeError at the start of every multi-process job), and a
fresh `pip install paddlepaddle==3.0.0` brings the newest protobuf."""


def release(version: str) -> Optional[tuple[int, int, int]]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def dist_version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def protobuf_conflict(paddle: Optional[str], protobuf: Optional[str]) -> Optional[str]:
    """Why paddle `paddle`'s fleet cannot start a multi-process job beside protobuf `protobuf` (None: it can)."""
    ours, theirs = release(paddle or ""), release(protobuf or "")
    if ours is None or theirs is None or ours >= PROTOBUF_7_FROM or theirs[0] < 7:
        return None
    return (f"paddle {paddle}'s fleet cannot start a multi-process job beside protobuf {protobuf} (protobuf 7 "
            f"removed FieldDescriptor.label, which paddle before 3.3.1 reads): pip install \"protobuf<7\", or "
            f"paddle 3.3.1 or newer")


def check_for_collectives() -> None:
    """UserError before a multi-process job whose fleet.init would fail on this paddle and protobuf."""
    conflict = protobuf_conflict(installed_version(), dist_version("protobuf"))
    if conflict:
        raise UserError(conflict)

"""MKL's code path on AMD CPUs (Train.fast_mkl_on_amd), and glibc malloc keeping freed memory for reuse.

On AMD, mklml takes a generic GEMM path unless MKL_DEBUG_CPU_TYPE=5 (about 2.6x faster ResNet18 steps); off by
default because its kernels round differently per batch size. `keep_freed_memory` raises glibc's mmap and
trim thresholds so steady-state steps fault in no memory (5-15% faster). Values the user set are kept.
Measurements and reasons: docs/design_notes.md, "CPU speed"; docs/benchmarks.md."""

from __future__ import annotations

import ctypes
import os
from typing import Mapping, MutableMapping

FAST_MKL = {"MKL_DEBUG_CPU_TYPE": "5"}
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
"""glibc's thresholds as environment variables (read at a process's start): what keep_freed_memory sets."""
_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD


def _cpuinfo_field(name: str, cpuinfo: str) -> str:
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    return _cpuinfo_field("vendor_id", cpuinfo)


def has_avx2(cpuinfo: str = "/proc/cpuinfo") -> bool:
    return "avx2" in _cpuinfo_field("flags", cpuinfo).split()


def cpu_env(fast_mkl_on_amd: bool, vendor: str, avx2: bool = True) -> dict[str, str]:
    """The MKL variables to set: the AVX2 path only on an AMD CPU that has AVX2 (on one without, MKL's AVX2
    kernels would stop the process with an illegal instruction)."""
    return dict(FAST_MKL) if fast_mkl_on_amd and vendor == "AuthenticAMD" and avx2 else {}


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects taskset and cpusets
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def apply_defaults(fast_mkl_on_amd: bool, environ: MutableMapping[str, str] = os.environ) -> Mapping[str, str]:
    """Set what the user has not; returns the MKL variables in effect."""
    for name, value in cpu_env(fast_mkl_on_amd, cpu_vendor(), has_avx2()).items():
        environ.setdefault(name, value)
    return {name: environ[name] for name in FAST_MKL if name in environ}


def keep_freed_memory(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Raise glibc's mmap and trim thresholds in this process (see above); the values set, {} where the user
    chose their own or the C library is not glibc."""
    if any(name in environ for name in MALLOC) or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return {}
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return {}
    return {name: value for name, value in MALLOC.items() if mallopt(_MALLOPT[name], int(value)) == 1}

"""MKL's code path on AMD CPUs (Train.fast_mkl_on_amd), and glibc malloc keeping freed memory for reuse.

paddle's GEMM (conv2d is im2col + matmul on CPU) comes from Intel's mklml, which on a non-Intel CPU takes a
generic code path: on a 2-core AMD EPYC, 29 GFLOP/s per core against 78 with MKL_DEBUG_CPU_TYPE=5 (the AVX2
path), which this mklml still honours; a ResNet18 step (32x32, batch 32) went from ~650 ms to ~250 ms of CPU
time (docs/benchmarks.md). On Intel CPUs the variable would disable AVX-512, so it is only set on AMD.

Off by default for now: per step, the gradients of batch 64 and of 2 x 32 agree to 1e-7 (relative) on either
path, but the AVX2 kernels round differently for different batch sizes, and over a LeNet epoch on the bundled
digits 1 process x batch 64 vs 2 ranks x batch 32 ended 1.5e-3 apart at Global.seed=7 (about 1e-7 at seeds
1-3, and at seed 7 on the generic path): past the 1e-4 that tests/test_trainer.py asks. (Likely a ReLU or
max-pool tie on the uniform backgrounds flipped by a last-bit difference.)

MKL reads the variable at its first call, so setting it in the running process before any computation is
enough. A value the user exported (even an empty one) is kept.

paddle's CPU allocations go through malloc. glibc hands buffers above its mmap threshold back to the kernel on
free and trims the heap top above its trim threshold (both grow only to a few MiB by themselves), so every
training step faulted its activations and gradients in again: ResNet18 at 32x32, batch 32, made ~11,000 page
faults and ~22 ms of kernel time a step on our VM. `keep_freed_memory` raises both thresholds in the running
process (mallopt: its allocations above 32 MiB still get their own mapping, and up to 1 GiB of free heap is
kept): no page faults in the steady state and steps 5-15% faster in alternating runs (docs/benchmarks.md).
Settings the user made (MALLOC_*_ variables or glibc.malloc tunables, which glibc read at start) are kept.
"""

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

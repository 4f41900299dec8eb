"""MKL's code path on AMD CPUs (Train.fast_mkl_on_amd).

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
"""

from __future__ import annotations

import os
from typing import Mapping, MutableMapping

FAST_MKL = {"MKL_DEBUG_CPU_TYPE": "5"}


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

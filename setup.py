"""Install: `pip install -e .` (CPU), or on a GPU machine install paddlepaddle-gpu first (see README)."""

import importlib.metadata
import os
import subprocess
import sys

from setuptools import find_packages, setup

# Builds that provide the same `paddle` module as the CPU `paddlepaddle`; requiring that one on top of
# them would install a second, clashing `paddle`.
PADDLE_GPU_BUILDS = ("paddlepaddle-gpu",)


def installed(dist: str) -> bool:
    """Whether `dist` is installed in the target environment.

    pip runs setup.py in an isolated build environment that hides the target's site-packages, so ask
    the target interpreter itself, with the isolation variables removed.
    """
    try:
        importlib.metadata.version(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    probe = f"import importlib.metadata as m; m.version({dist!r})"
    try:
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def paddle_requirement() -> list:
    return [] if any(installed(dist) for dist in PADDLE_GPU_BUILDS) else ["paddlepaddle>=3.0"]


setup(
    name="paddledist",
    version="0.1.0",
    description="PaddleX-style declarative configs for data-parallel image classification across machines",
    packages=find_packages(include=["paddledist", "paddledist.*"]),
    python_requires=">=3.10",
    install_requires=["pyyaml>=6.0", "omegaconf>=2.3", "pillow>=9.0", "numpy"] + paddle_requirement(),
    extras_require={"test": ["pytest>=7", "hypothesis>=6"], "viz": ["visualdl"]},
    entry_points={"console_scripts": ["paddledist=paddledist.cli:console_main"]},
)

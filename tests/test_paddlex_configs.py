"""PaddleX's own image-classification configs, as PaddleX 3.7 ships them: every model name PaddleX lists is
registered, and every shipped module config dry-runs through tools/train.py with only the data folder, the
class count and the device overridden (the issue's acceptance command, run on each file)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from paddledist.models import REGISTRY
import yaml

from helpers.paddlex_ref import model_names, module_config

REPO = Path(__file__).resolve().parent.parent
OVERRIDES = [f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", "Train.num_classes=10", "Global.device=cpu"]


@pytest.mark.multiproc  # PaddleX's configs may come from `pip download` (a process)
def test_every_paddlex_model_name_is_registered():
    names = model_names()
    assert len(names) >= 80, names
    assert sorted(set(names) - set(REGISTRY)) == []


def dry_run(config: Path, cwd: Path) -> tuple[str, subprocess.CompletedProcess]:
    argv = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(config), "--dry-run"]
    for override in OVERRIDES:
        argv += ["-o", override]
    return config.stem, subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.multiproc  # PaddleX's configs may come from `pip download` (a process)
def test_every_model_s_official_weights_are_the_url_its_paddlex_config_names():
    """`pretrain_weight_path: default` (weights.source) means the registry's URL: for every PaddleX model it is
    the one PaddleX's own module config trains from."""
    wrong = {}
    for name in model_names():
        train = yaml.safe_load(module_config(name).read_text())["Train"]
        if REGISTRY[name].cfg.url != train["pretrain_weight_path"]:
            wrong[name] = (REGISTRY[name].cfg.url, train["pretrain_weight_path"])
    assert wrong == {}


@pytest.mark.multiproc
def test_every_shipped_config_dry_runs(tmp_path):
    """Every model's config, the special models' from their own module folders (textline_orientation...) too."""
    configs = [module_config(name) for name in model_names()]
    assert len({c.stem for c in configs}) == len(model_names())
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: dry_run(c, tmp_path), configs))
    failed = {name: (p.stdout + p.stderr).strip().splitlines()[-1:] for name, p in results if p.returncode != 0}
    assert failed == {}, f"{len(failed)} of {len(configs)} PaddleX configs fail --dry-run"
    assert not (tmp_path / "output").exists(), "--dry-run must not write the configs' Global.output"
    for name, proc in results:
        assert "paddledist: dry run" in proc.stdout and f"model: {name}" in proc.stdout, (name, proc.stdout[-300:])

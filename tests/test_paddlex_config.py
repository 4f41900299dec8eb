"""PaddleX 3.x configs load unchanged: every key its image-classification module reads, its value spellings,
the one-line notice of accepted keys without effect, and typos still refused with a did-you-mean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paddledist.config import load
from paddledist.config.inert import INERT, inert_notice
from paddledist.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


EXTRA = """
Global:
  export_with_pir: True
Train:
  dy2st: False
  uniform_output_enabled: True
  basic_config_path: None
Evaluate:
  basic_config_path: null
Export:
  basic_config_path: Null
Predict:
  use_hpip: False
  hpip_config:
    backend: paddle
  kernel_option:
    run_mode: paddle
    cpu_threads: 4
Benchmark:
  env:
    FLAGS_cudnn_exhaustive_search: 1
  seed: 1
  do_eval: False
  num_workers: 2
  amp: O1
  dali: False
  shuffle: False
  shared_memory: True
  print_mem_info: True
"""


def write(tmp_path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.unit
def test_the_3x_extra_keys_load(tmp_path):
    cfg = load(write(tmp_path, EXTRA))
    assert cfg.Global.export_with_pir is True and cfg.Train.uniform_output_enabled is True
    assert cfg.Train.basic_config_path is None and cfg.Export.basic_config_path is None
    assert cfg.Predict.hpip_config == {"backend": "paddle"} and cfg.Predict.kernel_option.cpu_threads == 4
    assert cfg.Benchmark.env == {"FLAGS_cudnn_exhaustive_search": 1} and cfg.Benchmark.amp == "O1"


@pytest.mark.unit
@pytest.mark.parametrize("word", ["None", "none", "NONE", "Null", "null", "~"])
def test_paddlex_none_spellings_are_null_in_yaml_and_o(tmp_path, word):
    cfg = load(write(tmp_path, f"Train:\n  pretrain_weight_path: {word}\n  resume_path: x.pdparams\n"),
               [f"Train.resume_path={word}", f"CheckDataset.split.train_percent={word}"])
    assert cfg.Train.pretrain_weight_path is None and cfg.Train.resume_path is None
    assert cfg.CheckDataset.split.train_percent is None


@pytest.mark.unit
def test_paddlex_true_false_spellings(tmp_path):
    cfg = load(write(tmp_path, "CheckDataset:\n  convert:\n    enable: False\nTrain:\n  augment: False\n"),
               ["Train.dy2st=True", "Predict.use_hpip=False"])
    assert cfg.CheckDataset.convert.enable is False and cfg.Train.augment is False
    assert cfg.Train.dy2st is True and cfg.Predict.use_hpip is False


@pytest.mark.unit
@pytest.mark.parametrize("key, hint", [("Train.dy2sd", "Train.dy2st"), ("Predict.use_hpi", "Predict.use_hpip"),
                                       ("Benchmark.do_evl", "Benchmark.do_eval"),
                                       ("Train.uniform_output_enable", "Train.uniform_output_enabled")])
def test_typos_of_the_new_keys_still_exit_with_a_did_you_mean(key, hint):
    with pytest.raises(UserError, match=f"unknown config key {key}; did you mean {hint}"):
        load(None, [f"{key}=1"])


@pytest.mark.unit
def test_notice_names_exactly_the_inert_keys_that_were_set(tmp_path):
    assert inert_notice(load(None)) is None
    notice = inert_notice(load(write(tmp_path, EXTRA)))
    named = notice.split(": ", 2)[-1].split(", ")
    assert named == ["Predict.hpip_config", "Predict.kernel_option.cpu_threads", "Benchmark.env", "Benchmark.seed",
                     "Benchmark.num_workers", "Benchmark.amp"]
    assert set(named) <= set(INERT)


@pytest.mark.multiproc
def test_cli_prints_the_notice_once_at_start(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    path = write(tmp_path, "Predict:\n  use_hpip: True\n")
    done = subprocess.run([sys.executable, str(ROOT / "tools/main.py"), "-c", path, "-o", "Global.mode=check_dataset",
                           "--dry-run"], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("accepted PaddleX keys with no effect here: Predict.use_hpip\n") == 1


@pytest.mark.multiproc  # the reference may come from `pip download` (a process) on a fresh machine
def test_every_shipped_paddlex_module_config_loads():
    # each whole file as PaddleX ships it (tests/helpers/paddlex_ref.py reads them from the paddlex wheel)
    from helpers.paddlex_ref import module_configs

    configs = module_configs()
    assert len(configs) >= 80
    for path in configs:
        assert load(str(path)).Global.model == yaml.safe_load(path.read_text())["Global"]["model"], path


@pytest.mark.unit
@pytest.mark.parametrize("level, on", [("OFF", False), ("O1", True), ("O2", True), ("off", False)])
def test_paddlex_amp_levels(tmp_path, level, on):
    assert load(write(tmp_path, f"Train:\n  amp: {level}\n")).Train.amp is on
    assert load(None, [f"Train.amp={level}"]).Train.amp is on
    with pytest.raises(UserError, match="Train.amp must be true or false"):
        load(None, ["Train.amp=O3"])

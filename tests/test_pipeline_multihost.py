"""The list form on two network-namespace "hosts": the same tools/main.py command on both runs check_dataset on
each, train and evaluate as one 2-rank job, and export on the first machine only. Skips where namespaces
cannot be made (not root, no `ip netns`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.netns import netns_hosts  # noqa: F401  (fixture)

import pytest

pytestmark = pytest.mark.multihost

REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / "tools" / "main.py")
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DIGITS = str(REPO / "dataset" / "digits")


def test_two_hosts_run_check_train_evaluate_export_in_one_command(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(2)
    ips = ",".join(hosts.addresses)
    procs = {}
    for i in range(2):
        argv = [sys.executable, MAIN, "-c", CONFIG, "-o", "Global.mode=[check_dataset,train,evaluate,export]",
                f"Train.dist_ips={ips}", f"Global.output={tmp_path}/host{i}", f"Global.dataset_dir={DIGITS}",
                "Train.epochs_iters=1", "Train.peer_timeout=60"]
        log = open(tmp_path / f"host{i}.txt", "w")
        procs[i] = hosts.popen(i, argv, cwd=str(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    for i, proc in procs.items():
        try:
            code = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            code = None
        output = (tmp_path / f"host{i}.txt").read_text()
        assert code == 0, f"host {i}:\n{output[-4000:]}"
        assert "check_dataset: passed: ClsDataset, 10 classes, train 1438, val 359 samples" in output
    first, second = tmp_path / "host0", tmp_path / "host1"
    train = json.loads((first / "train_result.json").read_text())
    evaluated = json.loads((first / "evaluate_result.json").read_text())
    assert (train["world_size"], evaluated["world_size"], evaluated["num_samples"]) == (2, 2, 359)
    assert abs(evaluated["top1"] - train["best"]["top1"]) < 0.005
    assert json.loads((first / "check_dataset_result.json").read_text())["done_flag"] is True
    assert (first / "inference" / "inference.yml").is_file()
    # results, checkpoints and the exported model live on the first machine only
    assert not any((second / name).exists() for name in ("train_result.json", "evaluate_result.json", "inference",
                                                          "check_dataset_result.json", "best_model"))
    skipped = "export runs on the first machine of Train.dist_ips only; skipped here"
    assert skipped in (tmp_path / "host1.txt").read_text()

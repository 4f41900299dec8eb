"""Every bad input through the real CLI (tools/train.py): exit code 2, one line on stderr (what, where, how to
fix), no traceback, and an existing Global.output left exactly as it was (files, links, sizes, mtimes,
contents). Single- and multi-process jobs alike: the checks run before any worker or launcher starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.common import HOLDER_MARK
from helpers.files import snapshot  # noqa: F401

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "image_classification.yaml"
DIGITS = REPO / "dataset" / "digits"


def foreign_addresses(count: int = 2) -> list[str]:
    """RFC 5737 documentation addresses that are not on this machine (CI machines do use some of them)."""
    from paddledist.cluster import local_addresses

    mine = {a.address for a in local_addresses()}
    pool = [f"{net}.{i}" for net in ("198.51.100", "203.0.113", "192.0.2") for i in range(1, 250)]
    return [ip for ip in pool if ip not in mine][:count]


A, B = foreign_addresses()
TEST_NET = f"{A},{B}"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Weight files: a checkpoint of something else, a text file, a truncated checkpoint, a 10-class LeNet's."""
    from paddledist.engine import checkpoint
    from paddledist.models import build_model

    root = tmp_path_factory.mktemp("weights")
    w = {"w": np.ones((3,), np.float32)}
    real = checkpoint.save(str(root), "latest", w, w, {"epoch": 1}, link=True)
    (root / "notes.pdparams").write_text("these are not weights\n")
    (root / "cut.pdparams").write_bytes(Path(real).read_bytes()[:40])
    lenet = {k: v.numpy() for k, v in build_model("LeNet", 10, 32).state_dict().items()}
    ten = checkpoint.save(str(root), "epoch_1", lenet, w, {"epoch": 1}, link=False)
    return {"real": Path(real), "text": root / "notes.pdparams", "cut": root / "cut.pdparams", "lenet10": Path(ten)}


@pytest.fixture
def existing_output(tmp_path, files) -> Path:
    """An output folder as a previous run leaves it: results, logs, a checkpoint behind a `latest` link."""
    out = tmp_path / "out"
    (out / "logs" / "127.0.0.1").mkdir(parents=True)
    (out / "config.yaml").write_text("Global:\n  model: LeNet\n")
    (out / "train_result.json").write_text('{"done_flag": true}\n')
    (out / "logs" / "train.rank0.log").write_text("epoch 1/1\n")
    (out / "logs" / "127.0.0.1" / "workerlog.0").write_text("old worker log\n")
    (out / ".checkpoints" / "latest.epoch1").mkdir(parents=True)
    (out / ".checkpoints" / "latest.epoch1" / "latest.pdparams").write_bytes(files["real"].read_bytes())
    (out / "latest").symlink_to(os.path.join(".checkpoints", "latest.epoch1"))
    return out


# (id, overrides (with {real}, {text}, {cut}, {port}, {pid} filled in), fragments of the one line, --dry-run?)
CASES = [
    ("dist_ips name that does not resolve", [f"Train.dist_ips={A},node-b.invalid"],
     ["Train.dist_ips entry 2 host name 'node-b.invalid' does not resolve on this machine", "/etc/hosts"], False),
    ("dist_ips garbage", [f"Train.dist_ips={A},node b!"],
     ["Train.dist_ips entry 2 'node b!' is neither an IPv4 address nor a host name"], False),
    ("dist_master without nnodes", [f"Train.dist_master={A}:36543"], ["Train.dist_master needs Train.nnodes"], False),
    ("nnodes range with dist_ips", [f"Train.dist_ips={A},{B}", "Train.nnodes=2:3"],
     ["Train.nnodes=2:3 but Train.dist_ips lists 2 machines"], False),
    ("nnodes range backwards", [f"Train.dist_master={A}:36543", "Train.nnodes=3:2"],
     ["Train.nnodes=3:2: a range is MIN:MAX, the smaller count first"], False),
    ("dist_ips duplicate", [f"Train.dist_ips={A},{B},{A}"],
     [f"Train.dist_ips lists {A} twice (entries 1 and 3)"], False),
    ("dist_ips empty entry", [f"Train.dist_ips={A},,{B}"], ["Train.dist_ips has an empty entry"], False),
    ("dist_ips loopback among several", [f"Train.dist_ips=127.0.0.1,{B}"], ["loopback address"], False),
    ("this machine not listed", [f"Train.dist_ips={TEST_NET}"],
     [f"this machine is not in Train.dist_ips {TEST_NET}: its addresses are", "-o Train.node_ip="], False),
    ("one-entry dist_ips naming another machine", [f"Train.dist_ips={A}"],
     [f"this machine is not in Train.dist_ips {A}: its addresses are"], False),
    ("one-entry dist_ips naming another machine, dry run", [f"Train.dist_ips={B}"],
     [f"this machine is not in Train.dist_ips {B}"], True),
    ("global batch that does not split over the ranks", ["Train.global_batch_size=30", "Train.batch_size=10",
                                                          "Global.device=cpu:0,1"],
     ["the global batch of 30 samples (Train.global_batch_size) does not split over 2 rank(s)",
      "Train.elastic_batch=scale_lr"], False),
    ("dataset folder missing", ["Global.dataset_dir=/nonexistent/digits"],
     ["Global.dataset_dir: folder not found: /nonexistent/digits", "-o Global.dataset_dir=PATH"], False),
    ("dataset folder missing, 2 processes", ["Global.dataset_dir=/nonexistent/digits", "Global.device=cpu:0,1"],
     ["Global.dataset_dir: folder not found"], False),
    ("dataset folder missing, dry run", ["Global.dataset_dir=/nonexistent/digits", "Global.device=cpu:0,1"],
     ["Global.dataset_dir: folder not found"], True),
    ("labels >= num_classes", ["Train.num_classes=3"],
     ["label(s) outside [0, Train.num_classes=3)", "train.txt:4 images/0003.png has label 3",
      "-o Train.num_classes="], False),
    ("labels >= num_classes, 2 processes", ["Train.num_classes=3", "Global.device=cpu:0,1"],
     ["outside [0, Train.num_classes=3)"], False),
    ("unknown model", ["Global.model=ResNet999"],
     ["Global.model: unknown model 'ResNet999'; did you mean ResNet", "known: LeNet, "], False),
    ("unknown model, 2 processes, dry run", ["Global.model=ResNet999", "Global.device=cpu:0,1"],
     ["unknown model 'ResNet999'"], True),
    ("gpu on a cpu build", ["Global.device=gpu:0"],
     ["Global.device=gpu:0 but this paddle build has no GPU support", "-o Global.device=cpu"], False),
    ("gpu on a cpu build, 2 processes", ["Global.device=gpu:0,1"], ["no GPU support"], False),
    ("epochs < 1", ["Train.epochs_iters=0"], ["Train.epochs_iters must be >= 1, got 0", "-o Train.epochs_iters="],
     False),
    ("learning rate 0", ["Train.learning_rate=0"], ["Train.learning_rate must be a finite number > 0"], False),
    ("learning rate negative", ["Train.learning_rate=-0.1"], ["Train.learning_rate must be", "got -0.1"], False),
    ("resume missing", ["Train.resume_path=/nonexistent/latest.pdparams"],
     ["Train.resume_path: file not found: /nonexistent/latest.pdparams", "point it at an existing .pdparams"],
     False),
    ("resume missing, 2 processes", ["Train.resume_path=/nonexistent/latest.pdparams", "Global.device=cpu:0,1"],
     ["Train.resume_path: file not found"], False),
    ("resume not a checkpoint", ["Train.resume_path={text}"],
     ["Train.resume_path: {text} is not a paddle checkpoint"], False),
    ("resume truncated", ["Train.resume_path={cut}"], ["Train.resume_path: {cut} is not a paddle checkpoint"], False),
    ("resume of another model", ["Train.resume_path={real}"],
     ["Train.resume_path: {real} does not fit Global.model=LeNet", "missing or wrong shape: "], False),
    ("resume of another class count", ["Train.resume_path={lenet10}", "Train.num_classes=12"],
     ["does not fit Global.model=LeNet with Train.num_classes=12", "resume with the settings"], False),
    ("resume of another model, 2 processes", ["Train.resume_path={real}", "Global.device=cpu:0,1"],
     ["Train.resume_path: {real} does not fit"], False),
    ("pretrained missing", ["Train.pretrain_weight_path=/nonexistent/w.pdparams"],
     ["Train.pretrain_weight_path: file not found: /nonexistent/w.pdparams"], False),
    ("pretrained not a checkpoint", ["Train.pretrain_weight_path={text}"],
     ["Train.pretrain_weight_path: {text} is not a paddle checkpoint"], False),
    ("pretrained of another model", ["Train.pretrain_weight_path={real}"],
     ["Train.pretrain_weight_path: {real} does not fit Global.model: tensor ", " is missing",
      "use weights of the same model"], False),
    ("port in use on node 0", [f"Train.dist_ips={TEST_NET}", f"Train.node_ip={A}", "Train.port={port}"],
     [f"port {{port}} (Train.port) on node 0 ({A}) is in use, held by pid {{pid}} (", HOLDER_MARK,
      "-o Train.port="], False),
]


@pytest.mark.parametrize("name, overrides, fragments, dry_run", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(name, overrides, fragments, dry_run, tmp_path, files,
                                                   existing_output, busy_port):
    port, pid = busy_port
    fill = {k: str(v) for k, v in files.items()} | {"port": str(port), "pid": str(pid)}
    overrides = [o.format(**fill) for o in overrides]
    before = snapshot(existing_output)
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(CONFIG), "-o",
                           f"Global.dataset_dir={DIGITS}", f"Global.output={existing_output}", "Train.epochs_iters=1",
                           "Train.peer_timeout=5", *overrides, *(["--dry-run"] if dry_run else [])],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paddledist: error: "), done.stderr
    for fragment in fragments:
        assert fragment.format(**fill) in lines[0], lines[0]
    assert snapshot(existing_output) == before, "the existing Global.output was changed"
    assert sorted(os.listdir(tmp_path)) == sorted(["out"]), "something was written next to it"

"""Checkpoints survive a SIGKILL at any point of engine.checkpoint.save: a writer process saves a multi-MB
state dict in a loop and is killed after random delays; every time, latest/ (and best_model/) still load,
and their three files belong to one and the same save."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from paddledist.engine import checkpoint
from paddledist.errors import UserError

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent

# Saves epochs start, start+1, ... forever; every array holds the epoch number, so a mix of two saves shows.
WRITER = textwrap.dedent("""
    import functools, os, sys
    import numpy as np
    import paddle  # imported before "ready": the kill must land in saves, not in the import
    from paddledist.engine import checkpoint, checkpoint_hooks
    out, epoch = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    while True:
        params = {f"w{i}": np.full((1024, 1024), epoch, dtype=np.float32) for i in range(8)}  # 32 MiB
        states = {"epoch": epoch, "best_top1": 0.5}
        # the trainer's extra files: <name>.info.json and a copied inference/ (8 MiB of the epoch number)
        scratch = os.path.join(out, ".inference-scratch")
        os.makedirs(scratch, exist_ok=True)
        np.full((2 << 20,), epoch, np.float32).tofile(os.path.join(scratch, "inference.pdiparams"))
        extra = functools.partial(checkpoint_hooks._add_info_and_inference, info={"epoch": epoch}, inference=scratch)
        checkpoint.save(out, "latest", params, {"m": np.full((4,), epoch, np.float32)}, states, link=True,
                        extra=extra)
        if epoch % 3 == 0:
            checkpoint.save(out, "best_model", params, {"m": np.zeros(1)}, states, link=True)
        if epoch % 4 == 0:
            checkpoint.save(out, f"epoch_{epoch}", params, {"m": np.zeros(1)}, states, link=False)
        print(epoch, flush=True)
        epoch += 1
""")


def consistent_epoch(out: Path, name: str) -> int:
    ckpt = checkpoint.load(str(out / name / f"{name}.pdparams"), name)
    epoch = ckpt.states["epoch"]
    assert all(np.all(v == epoch) for v in ckpt.params.values()), f"{name}: parameters of several saves"
    if name == "latest":
        assert np.all(ckpt.opt["m"] == epoch), f"{name}: optimizer state of another save"
        assert json.loads((out / name / f"{name}.info.json").read_text())["epoch"] == epoch, "info.json of another save"
        inference = np.fromfile(out / name / "inference" / "inference.pdiparams", np.float32)
        assert inference.size == 2 << 20 and np.all(inference == epoch), "inference/ of another save or incomplete"
    return epoch


def test_a_killed_writer_never_leaves_a_broken_latest(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    epoch, kills, published, span = 1, 0, [], 1.0
    deadline = time.monotonic() + float(os.environ.get("PADDLEDIST_KILL_TEST_S", "12"))
    while (time.monotonic() < deadline or kills < 8 or len(set(published)) < 3) and kills < 80:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(epoch)], env=env,
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        # a save of 32 MiB takes about 0.1 s: the kill lands anywhere in one; on a loaded machine saves are
        # slower, so the window widens while kills keep landing before any save completed
        time.sleep(rng.uniform(0.0, span))
        writer.send_signal(signal.SIGKILL)
        done = writer.stdout.read().split()
        writer.wait()
        kills += 1
        if (out / "latest").exists() or done:
            latest = consistent_epoch(out, "latest")
            assert latest >= (int(done[-1]) if done else 0), "a completed save was lost"
            span = span if latest >= epoch else min(2 * span, 16.0)
            published.append(latest)
            epoch = latest + 1
        else:
            span = min(2 * span, 16.0)
        if (out / "best_model").exists():
            assert consistent_epoch(out, "best_model") % 3 == 0
    assert kills >= 8 and len(set(published)) >= 3, (kills, published)
    stored = os.listdir(out / checkpoint.STORE)
    # latest's and best_model's folders, and what the last killed save left (.tmp, unlinked, .old): no pile-up
    assert len(stored) <= 2 + 3, f"leftovers pile up: {stored}"


def test_a_rerun_reaching_the_published_epoch_keeps_latest_loadable(tmp_path):
    """Restarting from scratch in the same folder saves epoch k again while latest still points to epoch k."""
    params = {"w": np.ones((4,), np.float32)}
    for epoch in (1, 2, 1, 2):
        checkpoint.save(str(tmp_path), "latest", params, params, {"epoch": epoch}, link=True)
        assert checkpoint.load(str(tmp_path / "latest" / "latest.pdparams"), "x").states["epoch"] == epoch
    assert len(os.listdir(tmp_path / checkpoint.STORE)) == 1


def test_epoch_folders_are_replaced_whole(tmp_path):
    for value in (1.0, 2.0):
        checkpoint.save(str(tmp_path), "epoch_4", {"w": np.full((2,), value, np.float32)}, {"m": np.zeros(1)},
                        {"epoch": 4}, link=False)
    assert checkpoint.load(str(tmp_path / "epoch_4" / "epoch_4.pdparams"), "x").params["w"][0] == 2.0


@pytest.mark.parametrize("content", [b"", b"not a pickle", b"\x80\x04K\x01."])
def test_a_damaged_or_foreign_file_is_a_user_error(tmp_path, content):
    path = tmp_path / "x.pdparams"
    path.write_bytes(content)
    with pytest.raises(UserError, match="is not a paddle checkpoint"):
        checkpoint.load(str(path), "Train.resume_path")

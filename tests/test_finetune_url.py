"""Issue 16's done-when: PP-LCNet_x1_0 fine-tuned on 2 processes from weights a real HTTP server on 127.0.0.1
serves in PaddleClas's layout (1000 classes); the second run reads the cache (no request reaches the server);
with the server gone an uncached URL exits 2 with one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

from paddledist.models import build_model
from helpers.common import free_port
from helpers.weight_server import WeightServer

pytestmark = pytest.mark.multiproc
REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "image_classification.yaml"
PATH = "/ppcls/PPLCNet_x1_0_pretrained.pdparams"


def train(tmp_path: Path, out: str, url: str, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(CONFIG), "-o", "Global.device=cpu:0,1",
           "Global.model=PP-LCNet_x1_0", "Train.num_classes=10", "Train.input_size=32", "Train.epochs_iters=1",
           "Train.batch_size=128", "Train.warmup_steps=0", "Train.uniform_output_enabled=false",
           f"Train.pretrain_weight_path={url}",
           f"Global.output={tmp_path / out}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", *overrides]
    env = dict(os.environ, PADDLEDIST_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=420, env=env)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[bytes, dict]:
    """Our PP-LCNet_x1_0 at 1000 classes, saved as PaddleClas's PPLCNet_x1_0_pretrained.pdparams is laid out."""
    paddle.seed(3)
    model = build_model("PP-LCNet_x1_0", 1000, 224)
    file = tmp_path_factory.mktemp("w") / "w.pdparams"
    paddle.save(model.state_dict(), str(file))
    return file.read_bytes(), paddle.load(str(file), return_numpy=True)


def test_fine_tune_from_a_url_on_two_processes_then_from_the_cache(tmp_path, served):
    data, params = served
    with WeightServer({PATH: data}) as server:
        url = server.url(PATH)
        first = train(tmp_path, "first", url)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert server.requests == [PATH]
        assert f"downloaded {url}" in first.stdout + first.stderr
        fit = [line for line in first.stdout.splitlines() if "loaded " in line and "by name" in line]
        assert len(fit) == 1, first.stdout[-3000:]
        assert f"loaded {len(params) - 2} tensor(s)" in fit[0]
        assert ("replaced (classifier head, other class count): fc.weight [1280, 1000] -> [1280, 10], "
                "fc.bias [1000] -> [10]; ignored (not in the model): none") in fit[0]
        # What was chosen is printed: the recipe (PaddleX's Momentum and L2 for the model) and the size warning.
        assert "paddledist: PP-LCNet_x1_0: input 32 px" in first.stdout
        assert "Momentum(momentum=0.9, L2=3e-05)" in first.stdout and "designed for 224 px" in first.stdout
        result = json.loads((tmp_path / "first" / "train_result.json").read_text())
        assert (result["world_size"], result["done_flag"]) == (2, True)

        # Same URL again: the cached file, no request; a learning rate near 0 shows what was loaded.
        second = train(tmp_path, "second", url, "Train.learning_rate=1e-12")
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert server.requests == [PATH]
        assert "downloaded" not in second.stdout + second.stderr
    best = paddle.load(str(tmp_path / "second" / "best_model" / "best_model.pdparams"), return_numpy=True)
    convs = [k for k in params if k.endswith("conv.weight")]
    assert convs and all(np.allclose(best[k], params[k], atol=1e-6) for k in convs)
    assert best["fc.weight"].shape == (params["fc.weight"].shape[0], 10)


def test_an_unreachable_url_exits_2_with_one_line_before_any_worker(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/PPLCNet_x1_0_pretrained.pdparams"
    done = train(tmp_path, "out", url)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paddledist: error: "), done.stderr
    assert url in lines[0] and "Train.pretrain_weight_path" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "out" / "logs").exists()


def evaluate(tmp_path: Path, out: str, weights: str) -> dict:
    cmd = [sys.executable, str(REPO / "tools" / "eval.py"), "-c", str(CONFIG), "-o", "Global.model=PP-LCNet_x1_0",
           "Train.num_classes=10", "Train.input_size=32", f"Evaluate.weight_path={weights}",
           f"Global.output={tmp_path / out}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}"]
    env = dict(os.environ, PADDLEDIST_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((tmp_path / out / "evaluate_result.json").read_text())


def test_evaluate_reads_weights_from_a_url_and_from_default_as_from_a_file(tmp_path, monkeypatch):
    """Evaluate.weight_path as a URL (downloaded into the cache) and as `default` (the registry's official URL,
    here answered from a cache seeded with the file, as after an earlier download) evaluates the same weights
    as the local file. The head's weights are scaled up so that predictions differ image by image and depend
    on the weights."""
    from paddledist import hub
    from paddledist.models import model_spec

    paddle.seed(5)
    model = build_model("PP-LCNet_x1_0", 10, 32)
    state = {k: v * 50 if k.startswith("fc.") else v for k, v in model.state_dict().items()}
    local = tmp_path / "w.pdparams"
    paddle.save(state, str(local))
    by_file = evaluate(tmp_path, "file", str(local))
    assert 0.0 < by_file["top1"] < 1.0 and by_file["weight_path"] == str(local)
    with WeightServer({PATH: local.read_bytes()}) as server:
        by_url = evaluate(tmp_path, "url", server.url(PATH))
        assert server.requests == [PATH]
    official = model_spec("PP-LCNet_x1_0").cfg.url
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path / "home"))  # as evaluate() runs the tool
    cached = Path(hub.cached_path(official))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(local.read_bytes())
    by_default = evaluate(tmp_path, "default", "default")
    assert by_default["weight_path"] == str(cached)
    for got in (by_url, by_default):
        assert (got["top1"], got["loss"], got["num_samples"]) == (by_file["top1"], by_file["loss"], 359)

"""PaddleX as a test-only reference: its shipped module configs and model list (read from its wheel, nothing
of PaddleX committed), and the real `paddlex` package (3.7.2) run in child processes.

The configs come from the installed `paddlex` package when it is there, else from its wheel downloaded with
--no-deps into the test cache (the same cache as tests/helpers/paddleclas_ref.py).

paddlex pins PyYAML==6.0.2 and numpy<2.4 and needs opencv-contrib-python==4.10.0.84 for its predictor, so it
is not installed into the project's environment (it would downgrade numpy and PyYAML there). The tests install
it with its dependencies into a cache folder (from PADDLEX_WHEEL, else /tmp/wheels' wheel, else the package
registry), drop from it what the environment already provides (numpy, Pillow, PyYAML, ...) so that paddle and
paddlex share one numpy, and put that folder on the child's PYTHONPATH. Tests skip with the reason when it
cannot be installed.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers.common import unavailable

PADDLEX = "paddlex==3.7.2"
CACHE = Path(os.environ.get("PADDLEDIST_TEST_CACHE", Path.home() / ".cache" / "paddledist-tests"))
MODULES = "paddlex/configs/modules"
MODULE = f"{MODULES}/image_classification"
MODEL_LIST = "paddlex/modules/image_classification/model_list.py"


def _installed_root() -> Path | None:
    spec = importlib.util.find_spec("paddlex")
    return Path(spec.origin).parent.parent if spec and spec.origin else None


def _wheel_root() -> Path:
    target = CACHE / (PADDLEX.replace("==", "-") + "-modules")  # every module's configs (an older cache: one)
    if (target / MODULE).is_dir():
        return target
    wheels = CACHE / "wheels"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), PADDLEX]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        unavailable(f"cannot download {PADDLEX} as the reference (no package registry?): {done.stderr[-300:]}")
    wheel = next(wheels.glob("paddlex-*.whl"))
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp, [n for n in archive.namelist() if n.startswith((MODULES, MODEL_LIST))])
    tmp.rename(target) if not target.exists() else None
    return target


def paddlex_root() -> Path:
    root = _installed_root()
    return root if root is not None and (root / MODULE).is_dir() else _wheel_root()


def module_configs() -> list[Path]:
    """PaddleX's shipped image-classification configs, one per model (paddlex/configs/modules/...)."""
    return sorted((paddlex_root() / MODULE).glob("*.yaml"))


def module_config(model_name: str) -> Path:
    """PaddleX's shipped config for `model_name`, in whichever module folder holds it (image_classification,
    textline_orientation, doc_text_orientation...)."""
    found = sorted((paddlex_root() / MODULES).glob(f"*/{model_name}.yaml"))
    if not found:
        pytest.skip(f"PaddleX {VERSION} ships no module config for {model_name}")
    return found[0]


def model_names() -> list[str]:
    """MODELS of PaddleX's image-classification module (its model_list.py), read without importing PaddleX."""
    tree = ast.parse((paddlex_root() / MODEL_LIST).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODELS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"no MODELS list in {MODEL_LIST}")


VERSION = "3.7.2"
OPENCV = ("opencv-contrib-python==4.10.0.84", "pypdfium2")  # its "cv" extra's pieces the classifier needs
SITE = CACHE / f"paddlex-site-{VERSION}"
SHARED = ("numpy", "PIL", "yaml", "_yaml", "typing_extensions", "packaging")
"""Top-level modules the project's environment provides; paddlex must use those, not its own copies."""


def _source() -> str:
    wheel = os.environ.get("PADDLEX_WHEEL", f"/tmp/wheels/paddlex-{VERSION}-py3-none-any.whl")
    return wheel if os.path.isfile(wheel) else f"paddlex=={VERSION}"


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        unavailable(f"cannot install paddlex {VERSION} as the test reference: {done.stderr[-300:]}")


def site() -> Path:
    """The folder holding paddlex and its own dependencies (installed on first use)."""
    if all((SITE / m).is_dir() for m in ("paddlex", "cv2", "pypdfium2")):
        return SITE
    tmp = SITE.with_name(SITE.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _pip("--target", str(tmp), _source())
    _pip("--no-deps", "--target", str(tmp), *OPENCV)
    for entry in tmp.iterdir():
        name = entry.name
        if name.split("-")[0].split(".")[0] in SHARED or name.lower().startswith(("numpy", "pillow", "pyyaml")):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    if not SITE.exists():
        tmp.rename(SITE)
    return SITE


CHILD = r"""
import json, sys
import numpy as np
import paddlex
model_name, model_dir, images = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = paddlex.create_model(model_name=model_name, model_dir=model_dir, device="cpu")
out = {}
# batch_size 1, PaddleX's default: with larger batches 3.7.2 hands every result the whole batch's class_ids
for res in model.predict(images, batch_size=1):
    out[res["input_path"]] = {"class_ids": [int(i) for i in np.asarray(res["class_ids"]).reshape(-1)],
                              "label_names": [str(n) for n in np.asarray(res["label_names"]).reshape(-1)]}
print("PADDLEX_RESULT " + json.dumps(out))
"""


def paddlex_predict(model_name: str, model_dir: str, images: list[str]) -> dict:
    """{image path: {class_ids, label_names}} from paddlex.create_model(model_name, model_dir).predict."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site()), os.environ.get("PYTHONPATH", "")]),
               PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK="True")
    done = subprocess.run([sys.executable, "-c", CHILD, model_name, model_dir, json.dumps(images)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("PADDLEX_RESULT ")][-1]
    return json.loads(line[len("PADDLEX_RESULT "):])

"""PaddleClas's own architecture code, as a test-only reference.

`paddleclas` is not a dependency of paddledist (its PyPI release pins numpy==1.24.4). The tests install its
wheel with --no-deps into a cache folder and import single architecture modules from it, skipping the
package `__init__` files (they import PaddleClas's whole training stack). Only `ppcls.utils.save_load` is
replaced, by functions that refuse to run: the reference models are always built with pretrained=False.

`assert_same_function(ours, theirs, shape)` is the equivalence check every family's test runs: the same
parameter and buffer names and shapes, and the same eval-mode outputs for the same (random) weights.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

from helpers.common import unavailable

PADDLECLAS = "paddleclas==2.6.0"
CACHE = Path(os.environ.get("PADDLEDIST_TEST_CACHE", Path.home() / ".cache" / "paddledist-tests"))


def _install() -> Path:
    target = CACHE / PADDLECLAS.replace("==", "-")
    root = target / "paddleclas"
    if (root / "ppcls" / "arch").is_dir():
        return root
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp), PADDLECLAS]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        unavailable(f"cannot install {PADDLECLAS} as the reference (no package registry?): {done.stderr[-300:]}")
    tmp.rename(target) if not target.exists() else None
    return root


def _refuse(*_args, **_kwargs):
    raise AssertionError("the PaddleClas reference must be built with pretrained=False")


def ref_module(dotted: str) -> types.ModuleType:
    """Import e.g. `ppcls.arch.backbone.legendary_models.pp_lcnet` from the installed PaddleClas wheel."""
    root = _install()
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(root.joinpath(*parts[:i]))]
            sys.modules[name] = package
    if "ppcls.utils.save_load" not in sys.modules:
        stub = types.ModuleType("ppcls.utils.save_load")
        stub.load_dygraph_pretrain = stub.load_dygraph_pretrain_from_url = _refuse
        sys.modules.setdefault("ppcls.utils", types.ModuleType("ppcls.utils")).__path__ = [str(root / "ppcls/utils")]
        sys.modules["ppcls.utils.save_load"] = stub
    return importlib.import_module(dotted)


def randomise(model, seed: int = 0) -> dict:
    """Random values for every parameter and buffer (batch-norm statistics included, variances positive),
    so that equal outputs mean equal functions rather than equal initialisers."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, tensor in model.state_dict().items():
        shape = list(tensor.shape)
        if tensor.dtype.name.lower().startswith(("int", "bool", "uint")) or "int" in str(tensor.dtype):
            state[name] = tensor.numpy()
            continue
        value = rng.standard_normal(shape).astype("float32") * 0.1
        if name.endswith(("_variance", "running_var")):
            value = np.abs(value) + 0.5
        state[name] = value
    return state


def lively_state(model, seed: int = 0, gain: float = 1.0) -> dict:
    """Random weights under which a deep net's output depends on its input. `randomise`'s 0.1-scaled weights
    and norm scales shrink the signal several-fold a layer, so after 15-50 layers the logits are the head's
    bias and any two functions look equal. Here convs and linears get He-scaled weights (x gain, e.g. 2 for
    hardswish's halving near 0), norm scales near 1 and variances in [0.75, 1.25], small random biases."""
    rng = np.random.default_rng(seed)
    state = randomise(model, seed)
    for name, tensor in model.state_dict().items():
        shape = list(tensor.shape)
        if name not in state or state[name].dtype != np.float32:
            continue
        noise = rng.standard_normal(shape).astype("float32")
        if len(shape) >= 2:
            fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:]))  # paddle's Linear is [in, out]
            state[name] = noise * np.float32(gain * np.sqrt(2.0 / fan_in))
        elif name.endswith(("_variance", "running_var")):
            state[name] = np.abs(noise) * 0.5 + 0.75
        elif name.endswith(("weight", "gamma", "layer_scale", ".scale")):
            state[name] = 1.0 + 0.1 * noise
        else:
            state[name] = 0.1 * noise
    return state


def assert_same_layout(ours, theirs) -> None:
    """The same state_dict names, and the same shape under each name."""
    own = {k: list(v.shape) for k, v in ours.state_dict().items()}
    ref = {k: list(v.shape) for k, v in theirs.state_dict().items()}
    assert own.keys() == ref.keys(), (
        f"names differ: only ours {sorted(own.keys() - ref.keys())[:8]}, "
        f"only theirs {sorted(ref.keys() - own.keys())[:8]}")
    assert own == ref, [f"{k}: {own[k]} vs {ref[k]}" for k in own if own[k] != ref[k]][:8]


def assert_same_function(ours, theirs, shape, seed: int = 0, atol: float = 1e-4, gain: float = 1.0,
                         input_scale: float = 1.0) -> None:
    """Same state_dict names and shapes; theirs' lively random weights loaded into ours by name; the same eval
    outputs for a batch of different images, whose outputs must differ (else the comparison proves nothing)."""
    import paddle

    assert_same_layout(ours, theirs)
    assert shape[0] >= 2, "two images at least: the check needs outputs that differ"
    state = lively_state(theirs, seed, gain)
    theirs.set_state_dict(state)
    ours.set_state_dict(state)
    theirs.eval()
    ours.eval()
    x = paddle.to_tensor(input_scale * np.random.default_rng(seed + 1).standard_normal(shape).astype("float32"))
    with paddle.no_grad():
        a, b = ours(x), theirs(x)
    a = a.numpy() if hasattr(a, "numpy") else a
    b = b.numpy() if hasattr(b, "numpy") else b
    scale = max(1.0, float(np.abs(b).max()))
    spread = float(np.abs(b[0] - b[1]).max())
    assert spread > 1e-2 * scale, f"the outputs hardly depend on the input ({spread:.2e}): a vacuous check"
    np.testing.assert_allclose(a, b, rtol=0, atol=atol * scale)


def assert_same_in_train_mode(ours, theirs) -> None:
    """From the same random weights, the train-mode forward (batch statistics; the same dropout mask from the
    same paddle seed) and the running batch-norm statistics it updates equal PaddleClas's."""
    import paddle

    state = randomise(theirs, seed=5)
    ours.set_state_dict(state)
    theirs.set_state_dict(state)
    ours.train()
    theirs.train()
    x = paddle.to_tensor(np.random.default_rng(6).standard_normal([4, 3, 32, 32]).astype("float32"))
    paddle.seed(7)
    a = ours(x).numpy()
    paddle.seed(7)
    b = theirs(x).numpy()
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * max(1.0, float(np.abs(b).max())))
    theirs_after = theirs.state_dict()
    for key, value in ours.state_dict().items():
        if key.endswith(("_mean", "_variance")):
            assert not np.array_equal(value.numpy(), state[key]), f"{key} was not updated"
            np.testing.assert_allclose(value.numpy(), theirs_after[key].numpy(), rtol=1e-4, atol=1e-5, err_msg=key)


def train_steps(model, shape, steps: int = 3, adamw: bool = False) -> tuple[list, list]:
    """A few real training steps on random images (train mode, cross entropy, Momentum without L2 or AdamW
    without decay) -> (the losses, the names of trainable parameters that did not move)."""
    import paddle

    model.train()
    before = {k: v.numpy().copy() for k, v in model.named_parameters() if not v.stop_gradient}
    # no weight decay: a weight moves only through its gradient, so `frozen` names the ones the loss does not reach
    opt = (paddle.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.0, parameters=model.parameters()) if adamw
           else paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9, parameters=model.parameters()))
    x = paddle.to_tensor(np.random.default_rng(0).standard_normal(shape).astype("float32"))
    y = paddle.to_tensor(np.arange(shape[0], dtype="int64") % 4)
    losses = []
    for _ in range(steps):
        loss = paddle.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    frozen = [k for k, v in model.named_parameters() if k in before and np.array_equal(v.numpy(), before[k])]
    return losses, frozen


def parameter_attrs(model) -> dict:
    """What an optimizer reads from each parameter: its learning-rate multiplier, its own regularizer
    (overriding the optimizer's), whether it trains."""
    def regularizer(p):
        return None if p.regularizer is None else (type(p.regularizer).__name__, p.regularizer._coeff)
    return {name: (p.optimize_attr["learning_rate"], regularizer(p), p.trainable, p.stop_gradient)
            for name, p in model.named_parameters()}

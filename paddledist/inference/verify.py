"""An exported program checks its own answers: run it under every predictor setting a user will meet here and
compare with the dygraph model it came from.

One fixed input (2 standard-normal images, numpy seed 0) runs under plain CPU kernels, oneDNN where the build
has it and the GPU where one is present; the class probabilities are compared with the dygraph model's. The
result is inference.yml's `Verified` section; a disagreeing setting is one stderr line, and predict never runs
a setting that failed. Why (paddle's PIR inplace_pass under oneDNN once broke ConvNeXt): docs/architecture.md,
"Exports check their own answers"."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from paddledist.inference.predictor import infer, make_predictor

TOLERANCE = 1e-4
"""Max |difference| of a class probability. fp32 kernels that sum in another order (oneDNN's convolutions,
matmuls, reductions) move probabilities by ~1e-7..1e-5 on the models here; a setting that computes something
else moves them by 1e-3 and more (ConvNeXt under paddle 3.3.1's oneDNN: 8e-3 with random weights)."""
SEED, BATCH = 0, 2
SECTION = "Verified"


@dataclass(frozen=True)
class Setting:
    """One predictor setting, as `predict` names it: Global.device kind and Predict.kernel_option.run_mode."""
    device: str
    run_mode: str

    @property
    def name(self) -> str:
        return f"{self.device}/{self.run_mode}"


PLAIN, ONEDNN, GPU = Setting("cpu", "paddle"), Setting("cpu", "mkldnn"), Setting("gpu", "paddle")


def settings_here() -> tuple[list[Setting], dict[str, str]]:
    """The settings this machine can run, and the others with why not."""
    import paddle

    from paddledist import paddle_internals as internals

    run, skipped = [PLAIN], {}
    if internals.missing("onednn_build") is None and internals.has_onednn():
        run.append(ONEDNN)
    else:
        skipped[ONEDNN.name] = "this paddle build has no oneDNN"
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        run.append(GPU)
    else:
        skipped[GPU.name] = "no GPU here" if paddle.is_compiled_with_cuda() else "this paddle build has no CUDA"
    return run, skipped


def fixed_input(height: int, width: int) -> np.ndarray:
    return np.random.RandomState(SEED).standard_normal((BATCH, 3, height, width)).astype("float32")


def reference(model, batch: np.ndarray) -> np.ndarray:
    """The dygraph model's class probabilities (eval mode, as exported; the caller restores train mode)."""
    import paddle

    model.eval()
    with paddle.no_grad():
        return paddle.nn.functional.softmax(model(paddle.to_tensor(batch)), axis=-1).numpy()


def run_program(program: str, params: str, setting: Setting, batch: np.ndarray) -> np.ndarray:
    return infer(make_predictor(program, params, setting.run_mode, setting.device), batch)


def verify(model, program: str, params: str, height: int, width: int,
           settings: Optional[list[Setting]] = None, skipped: Optional[dict[str, str]] = None,
           runner: Optional[Callable[..., np.ndarray]] = None) -> dict:
    """The Verified section for the program at (program, params), exported from `model`; `runner` (default
    run_program) runs the program under one setting."""
    import paddle

    runner = runner or run_program
    if settings is None:
        settings, skipped = settings_here()
    batch = fixed_input(height, width)
    expected = reference(model, batch)
    entries = []
    for setting in settings:
        entry = {"name": setting.name, "device": setting.device, "run_mode": setting.run_mode}
        try:
            diff = float(np.abs(runner(program, params, setting, batch) - expected).max())
            entry.update(max_abs_diff=float(f"{diff:.3g}"), passed=bool(diff <= TOLERANCE))
        except Exception as e:  # noqa: BLE001  (a setting that cannot run the program is a failed setting)
            entry.update(max_abs_diff=None, passed=False, error=f"{type(e).__name__}: {e}".splitlines()[0][:200])
        entry["tolerance"] = TOLERANCE
        entries.append(entry)
    return {"paddle_version": paddle.__version__,
            "input": f"{BATCH}x3x{height}x{width} standard normal, numpy seed {SEED}",
            "compared": "class probabilities, exported program vs dygraph model",
            "settings": entries, "not_run": dict(skipped or {})}


def warn_disagreements(model_name: str, verified: dict, warned: set) -> None:
    """One stderr line per failed setting not yet in `warned` (the caller's: a training run's exporter keeps
    one across its checkpoints), which it joins."""
    for entry in verified["settings"]:
        key = (model_name, entry["name"])
        if entry["passed"] or key in warned:
            continue
        warned.add(key)
        what = (f"max |difference| of a probability {entry['max_abs_diff']} > {entry['tolerance']}"
                if entry.get("error") is None else f"it fails to run: {entry['error']}")
        print(f"paddledist: export: {model_name}'s exported program disagrees with the model under "
              f"{entry['name']} ({what}, paddle {verified['paddle_version']}); predict will not use "
              f"{entry['name']} for it", file=sys.stderr, flush=True)


def failed(spec: dict, device: str, run_mode: str) -> Optional[dict]:
    """inference.yml's Verified entry for (device, run_mode) when it failed, else None (passed, or not
    verified: an export of an older paddledist, or a setting not run at export)."""
    section = spec.get(SECTION) if isinstance(spec, dict) else None
    entries = section.get("settings") if isinstance(section, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if (isinstance(entry, dict) and entry.get("device") == device and entry.get("run_mode") == run_mode
                and entry.get("passed") is False):
            return entry
    return None

"""The predict stage: run an exported model (Predict.model_dir) on Predict.input through paddle.inference.

Nothing of the training code runs here: the program export wrote is loaded with paddle.inference's
Config + create_predictor, and images are preprocessed exactly as its inference.yml says. Results go to
`<Global.output>/predict_result.json` (one entry per image, top-1 first) and a summary to stdout.
Runs on the first machine only, in one process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from paddledist.config import Config, parse_device
from paddledist.config.safeload import read_yaml
from paddledist.data.formats import DecodeError, decode_image
from paddledist.engine.distenv import DistEnv
from paddledist.runfiles.results import write_json
from paddledist.errors import UserError
from paddledist.inference import verify
from paddledist.inference.predictor import PROGRAM_FILES, RUN_MODES, infer, make_predictor
from paddledist.inference.preprocess import TRANSFORM_OPS, preprocess

RESULT = "predict_result.json"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
SHOWN = 20
"""Images summarised on stdout; the json holds all."""


@dataclass(frozen=True)
class Exported:
    program: str
    params: str
    spec: dict
    """inference.yml as read."""


def run(cfg: Config, dist: DistEnv) -> None:
    run_mode = cfg.Predict.kernel_option.run_mode
    if run_mode not in RUN_MODES:
        raise UserError(f"Predict.kernel_option.run_mode: unknown run mode {run_mode!r}; use one of "
                        f"{', '.join(RUN_MODES)}")
    inputs = list_inputs(resolve_input(cfg.Predict.input))
    model_dir = cfg.Predict.model_dir or default_model_dir(cfg.Global.output)
    exported = read_model_dir(model_dir)
    run_mode, device = verified_setting(exported.spec, run_mode, cfg.Global.device)
    predictor = make_predictor(exported.program, exported.params, run_mode, device)
    entries = [entry for start in range(0, len(inputs), cfg.Predict.batch_size)
               for entry in predict_batch(predictor, exported.spec, inputs[start:start + cfg.Predict.batch_size])]
    os.makedirs(cfg.Global.output, exist_ok=True)
    path = os.path.join(cfg.Global.output, RESULT)
    write_json(path, entries)
    print_summary(entries, model_dir, run_mode, path)
    failed = [e for e in entries if "error" in e]
    if failed:
        raise UserError(f"predict: {len(failed)} of {len(entries)} input(s) could not be read (first: "
                        f"{failed[0]['error']}); the others are in {path}")


def default_model_dir(output: str) -> str:
    """PaddleX's place, best_model/inference (written by training with Train.uniform_output_enabled), else the
    export stage's <output>/inference."""
    best = os.path.join(output, "best_model", "inference")
    return best if os.path.isdir(best) else os.path.join(output, "inference")


def resolve_input(value):
    """Predict.input as PaddleX takes it: an http(s) URL is downloaded (into the weight cache) first."""
    if not isinstance(value, str) or not value.lower().startswith(("http://", "https://")):
        return value
    try:
        from paddledist import hub
    except ImportError:  # the weight hub arrives with its own change
        raise UserError(f"Predict.input: {value} is a URL, and this build has no downloader (paddledist.hub); "
                        "download the image and pass its path") from None
    return hub.resolve(value, "Predict.input")


def list_inputs(value) -> list[str]:
    """Predict.input: one image file, or every image file directly inside a folder (sorted by name)."""
    if not value:
        raise UserError("Predict.input is not set; pass an image file or a folder of images, e.g. "
                        "-o Predict.input=./dataset/digits/images/0004.png")
    if os.path.isfile(value):
        return [value]
    if not os.path.isdir(value):
        raise UserError(f"Predict.input: no such file or folder: {value}")
    found = sorted(os.path.join(value, name) for name in os.listdir(value)
                   if name.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(value, name)))
    if not found:
        raise UserError(f"Predict.input: {value} holds no image files ({', '.join(IMAGE_EXTENSIONS)})")
    return found


def read_model_dir(model_dir: str) -> Exported:
    found = [os.path.join(model_dir, f) for f in PROGRAM_FILES if os.path.isfile(os.path.join(model_dir, f))]
    program = found[0] if found else None
    params, yml = os.path.join(model_dir, "inference.pdiparams"), os.path.join(model_dir, "inference.yml")
    if program is None or not os.path.isfile(params) or not os.path.isfile(yml):
        raise UserError(f"Predict.model_dir: {model_dir} holds no exported model (inference.json or .pdmodel, "
                        "inference.pdiparams, inference.yml); run export first (-o Global.mode=export) or set "
                        "-o Predict.model_dir=PATH")
    spec = read_yaml(yml, "Predict.model_dir")  # bounded and strict, like every YAML the tool reads
    if not _is_paddlex_spec(spec):
        raise UserError(f"Predict.model_dir: {yml} is not a PaddleX image-classification inference.yml "
                        f"(PreProcess.transform_ops of {', '.join(TRANSFORM_OPS)}; PostProcess.Topk); "
                        "export again") from None
    return Exported(program, params, spec)


def _is_paddlex_spec(spec) -> bool:
    """PaddleX's image-classification inference.yml: known transform_ops, one op per entry, and a Topk."""
    try:
        ops = spec["PreProcess"]["transform_ops"]
        known = all(isinstance(op, dict) and len(op) == 1 and next(iter(op)) in TRANSFORM_OPS for op in ops)
        return known and int(spec["PostProcess"]["Topk"]["topk"]) >= 1
    except (KeyError, TypeError, ValueError):
        return False


def verified_setting(spec: dict, run_mode: str, device: str) -> tuple[str, str]:
    """(run_mode, device) as asked, unless export found the program disagreeing with its model there
    (inference.yml's Verified section): then plain CPU kernels, said in one line."""
    bad = verify.failed(spec, parse_device(device).kind, run_mode)
    if bad is None or verify.failed(spec, "cpu", "paddle") is not None:
        return run_mode, device  # nothing better to offer when plain kernels failed too (export said so)
    why = (f"max |difference| of a probability {bad.get('max_abs_diff')} > {bad.get('tolerance')}"
           if not bad.get("error") else bad["error"])
    print(f"paddledist: predict: not using {bad.get('name')}: at export this program disagreed with its model "
          f"there ({why}, paddle {spec[verify.SECTION].get('paddle_version')}); running plain CPU kernels "
          "(run_mode paddle)", flush=True)
    return "paddle", "cpu"


def predict_batch(predictor, spec: dict, paths: list[str]) -> list[dict]:
    arrays, entries = {}, {}
    for path in paths:
        try:
            arrays[path] = preprocess(decode_image(path), spec["PreProcess"]["transform_ops"])
        except DecodeError as e:
            entries[path] = {"input": path, "error": str(e)}
    if arrays:
        probs = infer(predictor, np.stack(list(arrays.values())))
        entries.update({path: top_k(path, row, spec["PostProcess"]["Topk"]) for path, row in zip(arrays, probs)})
    return [entries[p] for p in paths]


def top_k(path: str, probs: np.ndarray, post: dict) -> dict:
    names = post.get("label_list") or []
    ids = [int(i) for i in np.argsort(-probs, kind="stable")[:min(post.get("topk", 5), len(probs))]]
    return {"input": path, "class_ids": ids, "scores": [round(float(probs[i]), 6) for i in ids],
            "label_names": [names[i] if i < len(names) else str(i) for i in ids]}


def print_summary(entries: list[dict], model_dir: str, run_mode: str, path: str) -> None:
    print(f"paddledist: predict: {len(entries)} image(s) with {model_dir} (run_mode {run_mode})", flush=True)
    for e in entries[:SHOWN]:
        if "error" in e:
            print(f"  {e['input']}: ERROR {e['error']}")
            continue
        top = ", ".join(f"{c}{'' if n == str(c) else ' ' + n} ({s:.3f})"
                        for c, n, s in zip(e["class_ids"][:3], e["label_names"], e["scores"]))
        print(f"  {e['input']}: {top}")
    if len(entries) > SHOWN:
        print(f"  ... and {len(entries) - SHOWN} more")
    print(f"paddledist: predict: results in {path}", flush=True)

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
from PIL import Image

from paddledist.config import Config, parse_device
from paddledist.config.safeload import read_yaml
from paddledist.data.formats import DecodeError, decode_image
from paddledist.engine.distenv import DistEnv
from paddledist.engine.results import write_json
from paddledist.errors import UserError

RESULT = "predict_result.json"
RUN_MODES = ("paddle", "mkldnn")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
PROGRAM_FILES = ("inference.json", "inference.pdmodel")  # paddle 3 (PIR) writes .json, older paddle .pdmodel
INTERPOLATION = {"bilinear": Image.BILINEAR, "nearest": Image.NEAREST, "bicubic": Image.BICUBIC}
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
    inputs = list_inputs(cfg.Predict.input)
    model_dir = cfg.Predict.model_dir or os.path.join(cfg.Global.output, "inference")
    exported = read_model_dir(model_dir)
    predictor = make_predictor(exported, run_mode, cfg.Global.device)
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
    try:
        spec = read_yaml(yml, "Predict.model_dir")
        pre = spec["PreProcess"]
        assert pre["layout"] == "CHW" and pre["channel_order"] in ("RGB", "BGR")
        assert pre.get("interpolation", "bilinear") in INTERPOLATION
        assert len(pre["resize"]) == 2 if "resize" in pre else int(pre["resize_short"]) and len(pre["crop"]) == 2
        assert len(pre["mean"]) == len(pre["std"]) == 3 and spec["PostProcess"]["label_names"] is not None
    except (KeyError, TypeError, AssertionError):
        raise UserError(f"Predict.model_dir: {yml} is not an inference.yml this version wrote; export again") from None
    return Exported(program, params, spec)


def make_predictor(exported: Exported, run_mode: str, device: str):
    import paddle
    from paddle import inference

    config = inference.Config(exported.program, exported.params)
    spec = parse_device(device)
    if spec.kind == "gpu":
        if not paddle.is_compiled_with_cuda():
            raise UserError(f"Global.device={device} but this paddle build has no GPU support; "
                            "install paddlepaddle-gpu or use -o Global.device=cpu")
        config.enable_use_gpu(256, spec.ids[0])
    else:
        config.disable_gpu()
        _cpu_kernels(config, run_mode)
    config.disable_glog_info()
    return inference.create_predictor(config)


def _cpu_kernels(config, run_mode: str) -> None:
    """paddle: plain CPU kernels; mkldnn: oneDNN where this build has it (else a note and plain kernels)."""
    import paddle

    if run_mode == "mkldnn":
        if paddle.base.core.is_compiled_with_mkldnn():
            config.enable_mkldnn()
        else:
            print("paddledist: predict: this paddle build has no oneDNN; running plain CPU kernels", flush=True)
    else:
        config.disable_mkldnn()


def _resize_short_crop(image: np.ndarray, pre: dict, method) -> Image.Image:
    """The short side to resize_short, then the centre crop: the rounding of paddle's Resize(int) and CenterCrop
    that the eval transform used (a test compares the two)."""
    img, short = Image.fromarray(image), int(pre["resize_short"])
    w, h = img.size
    if min(w, h) != short:
        img = img.resize((short, int(short * h / w)) if w < h else (int(short * w / h), short), method)
    (ch, cw), (w, h) = pre["crop"], img.size
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return img.crop((left, top, left + cw, top + ch))


def preprocess(image: np.ndarray, pre: dict) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32, as inference.yml says; the arithmetic of data.pipeline.normalise."""
    method = INTERPOLATION[pre.get("interpolation", "bilinear")]
    resized = np.asarray(_resize_short_crop(image, pre, method) if "resize_short" in pre else
                         Image.fromarray(image).resize(tuple(pre["resize"][::-1]), method))
    if pre["channel_order"] == "BGR":
        resized = resized[:, :, ::-1]
    chw = resized.astype(np.float32).transpose(2, 0, 1)
    mean, std = (np.asarray(pre[k], np.float32)[:, None, None] for k in ("mean", "std"))
    return (chw - mean) / std


def predict_batch(predictor, spec: dict, paths: list[str]) -> list[dict]:
    arrays, entries = {}, {}
    for path in paths:
        try:
            arrays[path] = preprocess(decode_image(path), spec["PreProcess"])
        except DecodeError as e:
            entries[path] = {"input": path, "error": str(e)}
    if arrays:
        probs = infer(predictor, np.stack(list(arrays.values())))
        entries.update({path: top_k(path, row, spec["PostProcess"]) for path, row in zip(arrays, probs)})
    return [entries[p] for p in paths]


def infer(predictor, batch: np.ndarray) -> np.ndarray:
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(list(batch.shape))
    handle.copy_from_cpu(np.ascontiguousarray(batch))
    predictor.run()
    return predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()


def top_k(path: str, probs: np.ndarray, post: dict) -> dict:
    names = post["label_names"]
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

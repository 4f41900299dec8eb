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
PIL_INTERPOLATION = {"NEAREST": Image.NEAREST, "LINEAR": Image.BILINEAR, "BILINEAR": Image.BILINEAR,
                     "BICUBIC": Image.BICUBIC, "BOX": Image.BOX, "LANCZOS4": Image.LANCZOS}
"""PaddleX's names for PIL's filters (its _PIL_INTERP_DICT)."""
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
    from paddledist.stages import verify

    bad = verify.failed(spec, parse_device(device).kind, run_mode)
    if bad is None or verify.failed(spec, "cpu", "paddle") is not None:
        return run_mode, device  # nothing better to offer when plain kernels failed too (export said so)
    why = (f"max |difference| of a probability {bad.get('max_abs_diff')} > {bad.get('tolerance')}"
           if not bad.get("error") else bad["error"])
    print(f"paddledist: predict: not using {bad.get('name')}: at export this program disagreed with its model "
          f"there ({why}, paddle {spec[verify.SECTION].get('paddle_version')}); running plain CPU kernels "
          "(run_mode paddle)", flush=True)
    return "paddle", "cpu"


def make_predictor(program: str, params: str, run_mode: str, device: str):
    import paddle
    from paddle import inference

    config = inference.Config(program, params)
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
    from paddledist import paddle_internals as internals

    if run_mode == "mkldnn":
        if internals.has_onednn():
            config.enable_mkldnn()
        else:
            print("paddledist: predict: this paddle build has no oneDNN; running plain CPU kernels", flush=True)
    else:
        config.disable_mkldnn()


def preprocess(image: np.ndarray, ops: list[dict]) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32 through inference.yml's transform_ops, read as PaddleX's predictor reads them."""
    for op in ops:
        (name, args), = op.items()
        image = TRANSFORM_OPS[name](image, **(args or {}))
    return image


def _resize(image: np.ndarray, size=None, resize_short=None, backend="cv2", interpolation="LINEAR") -> np.ndarray:
    height, width = image.shape[:2]
    if size is not None:
        width, height = (size, size) if isinstance(size, int) else size
    else:
        scale = resize_short / min(height, width)
        width, height = round(width * scale), round(height * scale)
    if backend != "pil":
        raise UserError(f"inference.yml: ResizeImage backend {backend!r} needs OpenCV; paddledist resizes with PIL "
                        "(backend: pil), as its own exports say")
    if (width, height) == image.shape[1::-1]:
        return image
    return np.asarray(Image.fromarray(image).resize((width, height), PIL_INTERPOLATION[interpolation.upper()]))


def _crop(image: np.ndarray, size=224) -> np.ndarray:
    width, height = (size, size) if isinstance(size, int) else size
    top, left = (image.shape[0] - height) // 2, (image.shape[1] - width) // 2
    if top < 0 or left < 0:
        raise UserError(f"inference.yml: CropImage size {size} is larger than the resized image {image.shape[:2]}")
    return image[top:top + height, left:left + width]


def _normalize(image: np.ndarray, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), scale=1 / 255,
               order="", channel_num=3) -> np.ndarray:
    # PaddleX's arithmetic: x * (scale / std) - mean / std, in float32
    alpha = np.asarray([scale / s for s in std], np.float32)
    beta = np.asarray([-m / s for m, s in zip(mean, std)], np.float32)
    return image.astype(np.float32) * alpha + beta


TRANSFORM_OPS = {"ResizeImage": _resize, "CropImage": _crop, "NormalizeImage": _normalize,
                 "ToCHWImage": lambda image: image.transpose(2, 0, 1)}
"""The transform_ops PaddleX's image-classification predictor knows, in the order it runs them."""


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


def infer(predictor, batch: np.ndarray) -> np.ndarray:
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(list(batch.shape))
    handle.copy_from_cpu(np.ascontiguousarray(batch))
    predictor.run()
    return predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()


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

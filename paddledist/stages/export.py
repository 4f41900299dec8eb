"""The export stage: Export.weight_path (default best_model) -> a Paddle Inference model in Global.output/inference.

`paddle.jit.save` with an InputSpec [None, 3, S, S] (S = the recipe's input size: Train.input_size, or the model's
design size when null; [None, 3, H, W] for non-square models) writes inference.json (paddle 3's PIR program: with
Global.export_with_pir, or FLAGS_json_format_model unset or true, as PaddleX 3.7 decides) or inference.pdmodel
(the legacy program: export_with_pir false and FLAGS_json_format_model=0) and inference.pdiparams; inference.yml
beside them is PaddleX's (Global.model_name, PreProcess.transform_ops, PostProcess.Topk with the label names), so
paddlex.create_model and PaddleX pipelines load the folder. The exported program ends in a softmax, so it outputs
class probabilities (like PaddleX's exported classifiers). The program is then run under every predictor setting
this machine has and compared with the model (inference/verify.py): inference.yml's `Verified` section. Everything
is written into a temporary folder first and renamed into place, so a failed export leaves any previous model as it was.
Runs on the first machine only, in one process, on CPU (tracing needs no accelerator).
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

import yaml

from paddledist.config import Config
from paddledist.data.formats import load_samples, read_label_dict
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError
from paddledist.fsio import atomic_write, guarded, remove
from paddledist.models import check_model_name
from paddledist.models.recipe import recipe
from paddledist.inference import verify
from paddledist.stages import weights

FOLDER, PREFIX, INPUT_NAME, TOPK = "inference", "inference", "x", 5


def run(cfg: Config, dist: DistEnv) -> None:
    check_model_name(cfg.Global.model)
    params = weights.read(cfg, "Export", DistEnv())
    import paddle

    paddle.set_device("cpu")
    model = weights.build(cfg, params, "Export")
    path, _ = weights.resolve(cfg, "Export")
    final = os.path.join(cfg.Global.output, FOLDER)
    tmp = os.path.join(cfg.Global.output, f".{FOLDER}.tmp-{os.getpid()}")
    remove(tmp)
    with guarded(final, cleanup=lambda: remove(tmp)):  # written whole into tmp, then renamed into place
        write_inference(cfg, model, tmp, path)
        publish(tmp, final)
    print(f"paddledist: export: {path} -> {final} ({', '.join(sorted(os.listdir(final)))})", flush=True)


def write_inference(cfg: Config, model, folder: str, weight_path: str, labels: Optional[list[str]] = None,
                    warned: Optional[set] = None) -> None:
    """The inference program, its parameters and PaddleX's inference.yml into `folder` (created); `labels`: the
    class names when the caller has them (training, at every checkpoint), else read as label_names does;
    `warned`: the disagreements already printed (training passes one set for all its checkpoints)."""
    os.makedirs(folder, exist_ok=True)
    rec = recipe(cfg)
    pir = with_pir(cfg, os.environ)
    prefix = os.path.join(folder, PREFIX)
    save_program(model, (rec.input_height, rec.input_size), prefix, pir)
    checked = verify.verify(model, prefix + (".json" if pir else ".pdmodel"), prefix + ".pdiparams",
                            rec.input_height, rec.input_size)
    verify.warn_disagreements(cfg.Global.model, checked, set() if warned is None else warned)
    atomic_write(os.path.join(folder, "inference.yml"),
                 yaml.safe_dump({**inference_yml(cfg, weight_path, labels), verify.SECTION: checked},
                                sort_keys=False, allow_unicode=True))


def with_pir(cfg: Config, env) -> bool:
    """PaddleX 3.7's rule: PIR when Global.export_with_pir or FLAGS_json_format_model (default on)."""
    flag = env.get("FLAGS_json_format_model", "1").strip().lower() not in ("0", "false", "off", "no")
    return cfg.Global.export_with_pir or flag


def save_program(model, input_size: int | tuple, prefix: str, pir: bool = True) -> None:
    """`input_size`: the side of square inputs, or (height, width)."""
    import paddle

    from paddledist import paddle_internals as internals

    class WithSoftmax(paddle.nn.Layer):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner, self.softmax = inner, internals.export_softmax()

        def forward(self, x):
            return self.softmax(self.inner(x), axis=-1)

    height, width = (input_size, input_size) if isinstance(input_size, int) else input_size
    spec = paddle.static.InputSpec([None, 3, height, width], "float32", name=INPUT_NAME)
    wrapped = WithSoftmax(model)
    wrapped.eval()
    if pir:
        paddle.jit.save(wrapped, prefix, input_spec=[spec])
        return
    with paddle.pir_utils.OldIrGuard():
        paddle.jit.save(wrapped, prefix, input_spec=[spec])


def inference_yml(cfg: Config, weight_path: str, labels: Optional[list[str]] = None) -> dict:
    """PaddleX's inference.yml for image classification (what paddlex.create_model reads), plus our own facts
    under Global (PaddleX ignores them)."""
    from paddledist.data.pipeline import preprocess_spec

    rec = recipe(cfg)  # the same resize/crop/mean/std that evaluation used
    return {
        "Global": {"model_name": cfg.Global.model, "num_classes": cfg.Train.num_classes,
                   "input_size": rec.input_size, "input_height": rec.input_height, "input_name": INPUT_NAME,
                   "weight_path": weight_path,
                   "output": "probabilities"},
        "PreProcess": {"transform_ops": preprocess_spec(rec.input_size, rec.resize_short, rec.interpolation,
                                                        rec.mean, rec.std, rec.input_height)},
        "PostProcess": {"Topk": {"topk": min(TOPK, cfg.Train.num_classes), "label_list": label_names(cfg, labels)}},
    }


def label_names(cfg: Config, names: Optional[list[str]] = None) -> list[str]:
    """`names` when given, else the names training recorded (Global.output/label_dict.txt), else the dataset's;
    the class ids for the rest, Train.num_classes in all."""
    n = cfg.Train.num_classes
    if names is None:
        names = read_label_dict(os.path.join(cfg.Global.output, "label_dict.txt"))
    if not names:
        try:
            names = load_samples(cfg.Global.dataset_dir, "val", cfg.Global.seed, True).label_names
        except UserError:
            names = []
    names = [str(x) for x in names][:n]
    return names + [str(i) for i in range(len(names), n)]


def publish(tmp: str, final: str) -> None:
    """Move the complete model into place; an older model is moved aside first and removed after."""
    old = f"{final}.old-{os.getpid()}"
    if os.path.lexists(final):
        os.rename(final, old)
    os.rename(tmp, final)
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old)
    elif os.path.lexists(old):
        os.remove(old)

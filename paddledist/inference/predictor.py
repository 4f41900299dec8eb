"""A paddle.inference predictor for an exported program, and one batch through it."""

from __future__ import annotations

import numpy as np

from paddledist.config import parse_device
from paddledist.errors import UserError

RUN_MODES = ("paddle", "mkldnn")
PROGRAM_FILES = ("inference.json", "inference.pdmodel")  # paddle 3 (PIR) writes .json, older paddle .pdmodel


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


def infer(predictor, batch: np.ndarray) -> np.ndarray:
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(list(batch.shape))
    handle.copy_from_cpu(np.ascontiguousarray(batch))
    predictor.run()
    return predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()

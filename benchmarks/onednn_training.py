"""Can paddle's CPU training run on oneDNN (and bf16)? Each variant trains ResNet18 (32x32, batch 32, Momentum,
one thread) in a fresh process and reports its step time and which oneDNN primitives ran (ONEDNN_VERBOSE).

    python benchmarks/onednn_training.py            # ~1 min; a table, then one JSON line

Variants: paddle's dygraph as paddledist trains (fp32; FLAGS_use_onednn=1; bf16 autocast) and the static
graph (PIR executor: fp32; FLAGS_use_onednn=1; the same with bf16 AMP). ResNet18's stem max pool has no working
oneDNN backward in paddle 3.3.1, so the static oneDNN variants are also run with that pool replaced by an
average pool of the same shape: a different model, measured only to see what oneDNN would buy.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

VARIANTS = {  # name: (graph, environment, bf16, stem pool)
    "dygraph fp32": ("dygraph", {}, False, "max"),
    "dygraph fp32, FLAGS_use_onednn=1": ("dygraph", {"FLAGS_use_onednn": "1"}, False, "max"),
    "dygraph bf16 autocast": ("dygraph", {}, True, "max"),
    "static fp32": ("static", {}, False, "max"),
    "static fp32, FLAGS_use_onednn=1": ("static", {"FLAGS_use_onednn": "1"}, False, "max"),
    "static fp32, FLAGS_use_onednn=1, max pool with index": ("static", {"FLAGS_use_onednn": "1"}, False, "index"),
    "static fp32, FLAGS_use_onednn=1, avg-pool stem": ("static", {"FLAGS_use_onednn": "1"}, False, "avg"),
    "static bf16 AMP, FLAGS_use_onednn=1, avg-pool stem": ("static", {"FLAGS_use_onednn": "1"}, True, "avg"),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="run only this variant (repeatable; default: all of them)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(train(args.child, args.steps)), flush=True)
        return
    unknown = [name for name in args.only if name not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    results = {name: measure(name, args.steps) for name in (args.only or VARIANTS)}
    print(f"{'variant':<52} {'ms/step':>8} {'loss':>7} {'oneDNN/step':>11} {'bf16':>5}  notes")
    for name, r in results.items():
        print(f"{name:<52} {r.get('ms', '-'):>8} {r.get('loss', '-'):>7} {r.get('onednn_per_step', '-'):>11} "
              f"{r.get('bf16_primitives', '-'):>5}  {r.get('error') or r.get('top', '')}")
    print(json.dumps(results))


def measure(name: str, steps: int) -> dict:
    """Timed run, then a short run with ONEDNN_VERBOSE for what oneDNN executed (its timing changes the step)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **VARIANTS[name][1]}
    timed = child(name, steps, env)
    if "error" in timed:
        return timed
    return {**timed, **primitives(run_child(name, 4, {**env, "ONEDNN_VERBOSE": "1"}).stdout, 4)}


def run_child(name: str, steps: int, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, __file__, "--child", name, "--steps", str(steps)], capture_output=True,
                          text=True, env=env, timeout=600)


def child(name: str, steps: int, env: dict) -> dict:
    """Step time and final loss of one variant, or the reason it could not train."""
    done = run_child(name, steps, env)
    if done.returncode != 0:
        lines = (done.stderr + done.stdout).splitlines()
        why = [line.split("]", 1)[-1] for line in lines if "raises an exception" in line]  # the failing op
        why += [line for line in lines if "Error" in line]
        return {"error": (why[0] if why else f"exit {done.returncode}").strip()[:160]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def primitives(verbose: str, steps: int) -> dict:
    """oneDNN primitives executed per step, and where their time went (ms per step by kind and implementation)."""
    count, ms, bf16 = 0, collections.Counter(), 0
    for line in verbose.splitlines():
        if ",primitive,exec," not in line:
            continue
        f = line.split(",")
        count += 1
        bf16 += "bf16" in line
        ms[f"{f[5]} {f[6]}"] += float(f[-1])
    top = ", ".join(f"{k} {v / steps:.0f} ms" for k, v in ms.most_common(5))  # timed under ONEDNN_VERBOSE
    return {"onednn_per_step": count // steps, "bf16_primitives": bf16 // steps, "onednn_ms_per_step":
            round(sum(ms.values()) / steps, 1), "top": top}


def train(name: str, steps: int) -> dict:
    import numpy as np
    import paddle

    graph, _, bf16, pool = VARIANTS[name]
    paddle.seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, 10, 32)
    step = dygraph_step(paddle, x, y, bf16) if graph == "dygraph" else static_step(paddle, x, y, bf16, pool)
    times, loss = [], None
    for _ in range(steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    return {"ms": round(1000 * float(np.median(times[3:] or times)), 1), "loss": round(loss, 4)}


def model_and_optimizer(paddle, pool: str = "max"):
    model = paddle.vision.models.resnet18(num_classes=10)
    if pool == "avg":
        model.maxpool = paddle.nn.AvgPool2D(3, 2, 1)
    elif pool == "index":  # the same max pool through max_pool2d_with_index, which has no oneDNN kernel
        model.maxpool = max_pool_with_index(paddle)
    opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, parameters=model.parameters(),
                                    weight_decay=1e-4)
    return model, opt


def max_pool_with_index(paddle):
    class Pool(paddle.nn.Layer):
        def forward(self, t):
            return paddle.nn.functional.max_pool2d(t, 3, 2, 1, return_mask=True)[0]
    return Pool()


def dygraph_step(paddle, x, y, bf16: bool):
    model, opt = model_and_optimizer(paddle)
    x, y = paddle.to_tensor(x), paddle.to_tensor(y)

    def step() -> float:
        with paddle.amp.auto_cast(enable=bf16, dtype="bfloat16"):
            loss = paddle.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss)
    return step


def static_step(paddle, x, y, bf16: bool, pool: str):
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        xs = paddle.static.data("x", list(x.shape), "float32")
        ys = paddle.static.data("y", list(y.shape), "int64")
        model, opt = model_and_optimizer(paddle, pool)
        loss = paddle.nn.functional.cross_entropy(model(xs), ys)
        if bf16:
            opt = paddle.static.amp.decorate(opt, level="O1", dtype="bfloat16", use_dynamic_loss_scaling=False,
                                             init_loss_scaling=1.0)
        opt.minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    return lambda: float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])[0])


if __name__ == "__main__":
    main()

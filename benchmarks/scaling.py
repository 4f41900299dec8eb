"""Data-parallel scaling of paddledist against the machine's ceiling and against plain paddle, in one run.

    python benchmarks/scaling.py --quick                       # CPU, one rank per core (here 2), < 10 min
    python benchmarks/scaling.py                               # more steps, 5 repeats, and each setting's effect
    python benchmarks/scaling.py --device gpu --nproc 8        # one GPU per rank (NCCL), same measurements

Images/s of ResNet18 (32x32 input, --batch-size per rank), on synthetic data and on a folder of PNGs read
through the ClsDataset loader:
  (a) one process: plain paddle as installed, and with paddledist's CPU settings (the best single process)
  (b) N independent processes, no communication: the ceiling for N ranks
  (c) N-rank data parallel through paddledist (tools/train.py): images/s from train_result.json, epoch 1
      (warm-up) left out
  (d) N-rank data parallel with a bare `paddle.distributed.launch` + fleet loop (benchmarks/bare_fleet.py)
Also: start-up (command to first step, paddledist vs bare launch), the loader's images/s against training,
and images/s per core against the machine's GEMM rate. Each measurement records the CPU share other processes
took meanwhile ("foreign"); one above --max-foreign is repeated (at most twice). Reported values are medians.
Ceiling and data-parallel runs alternate (--pairs pairs on synthetic data, --repeats on PNGs): this machine's
speed drifts by +-10% over minutes, so `efficiency` is the median of the per-pair ratios c / b on synthetic data
(single pairs spread by about +-0.05 here, so --quick takes as many pairs as the full run); the table shows the
medians.
`efficiency_vs_slowest_process` divides c by N x the slowest process of each ceiling run instead: the most a
synchronous data-parallel job could make when the cores do not run equally fast (the ceiling adds them up).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from paddledist.engine.cpu import MALLOC, cpu_env, cpu_vendor, has_avx2, usable_cpus  # noqa: E402  (no paddle)

BARE = os.path.join(ROOT, "benchmarks", "bare_fleet.py")
TRAIN = os.path.join(ROOT, "tools", "train.py")
CONFIG = os.path.join(ROOT, "configs", "image_classification.yaml")
TUNING_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DEBUG_CPU_TYPE", *MALLOC)
"""Removed from every run's environment; the runs that want them set them."""


@dataclass
class Row:
    name: str
    data: str
    values: list = field(default_factory=list)
    foreign: list = field(default_factory=list)
    bounds: list = field(default_factory=list)
    """Ceiling runs: N x the slowest process's images/s, the most any synchronous data parallel could make."""

    @property
    def median(self) -> Optional[float]:
        return round(statistics.median(self.values), 1) if self.values else None


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="paddledist-bench-")
        self.rows: list[Row] = []
        self.cpus = usable_cpus()
        self.vendor = cpu_vendor()
        self.fast_mkl = bool(cpu_env(args.fast_mkl, self.vendor, has_avx2()))
        """Whether the tuned runs take MKL's AVX2 path (asked for, on an AMD CPU with AVX2)."""
        self.plain = {k: v for k, v in os.environ.items() if k not in TUNING_VARS}
        self.bound: Optional[float] = None
        """Set by a ceiling run: N x its slowest process's images/s."""
        self.bound_ratios: dict[str, list[float]] = {}

    # ---- measuring ----------------------------------------------------------------------------------------

    def measure(self, name: str, data: str, run: Callable[[], float], repeats: int, procs: Optional[int] = None,
                quiet: bool = False) -> Row:
        """Median of `repeats` runs. A run during which other processes took more than --max-foreign of the
        cores this one leaves idle is repeated (up to 2 extra tries); the least disturbed runs are kept."""
        procs = self.args.nproc if procs is None else procs
        allowed = self.args.max_foreign + max(0, self.cpus - procs) / self.cpus if self.args.device == "cpu" else 1
        tries: list[tuple[float, float, Optional[float]]] = []
        while len([t for t in tries if t[1] <= allowed]) < repeats and len(tries) < repeats + 2:
            wait_quiet(self.args.quiet_wait)
            before, self.bound = cpu_snapshot(), None
            value = run()
            foreign = foreign_share(before, cpu_snapshot()) or 0.0
            tries.append((value, foreign, self.bound))
            if foreign > allowed:
                print(f"  {name}: {value:.1f} images/s with {100 * foreign:.0f}% foreign load; repeating", flush=True)
        kept = sorted(tries, key=lambda t: t[1])[:repeats]
        row = Row(name, data, [round(v, 1) for v, _, _ in kept], [f for _, f, _ in kept],
                  [round(b, 1) for _, _, b in kept if b is not None])
        if not quiet:
            self.report(row)
        return row

    def report(self, row: Row) -> None:
        print(f"{row.name:<52} {row.data:<9} {row.median:>8} images/s  (runs {row.values}, foreign "
              f"{max(row.foreign) * 100:.0f}%)", flush=True)
        self.rows.append(row)

    def paired(self, names: tuple[str, str], data: str, runs: tuple[Callable[[], float], Callable[[], float]],
               pairs: int) -> tuple[Row, Row, list[float]]:
        """The ceiling and data parallel measured back to back, `pairs` times, in alternating order: this
        machine's speed drifts by +-10% over minutes, so each ratio compares runs a minute apart and the
        efficiency is their median."""
        rows = [Row(name, data) for name in names]
        ratios, bound_ratios = [], []
        runs[0]()  # warm-up, not kept: the first heavy run after lighter ones ran fastest here (pair 1 was low)
        for i in range(pairs):
            order = (0, 1) if i % 2 == 0 else (1, 0)  # ABBA: a drift within a pair biases alternate ratios
            got = [None, None]
            for k in order:
                got[k] = self.measure(names[k], data, runs[k], 1, quiet=True)
            for row, one in zip(rows, got):
                row.values += one.values
                row.foreign += one.foreign
                row.bounds += one.bounds
            ratios.append(round(got[1].values[0] / got[0].values[0], 3))
            bound = f""
            if got[0].bounds:
                bound_ratios.append(round(got[1].values[0] / got[0].bounds[0], 3))
                bound = f" (against N x the slower process, {got[0].bounds[0]}: {bound_ratios[-1]})"
            print(f"  pair {len(ratios)}: {names[1]} / {names[0]} = {ratios[-1]}{bound}", flush=True)
        for row in rows:
            self.report(row)
        self.bound_ratios[data] = bound_ratios
        return rows[0], rows[1], ratios

    def tuned(self) -> dict:
        """What paddledist sets in its workers, as environment variables (with --fast-mkl: MKL's AVX2 path on
        AMD; glibc keeping freed memory): the ceiling and the tuned bare runs get every setting the job gets."""
        return {**self.plain, **cpu_env(self.args.fast_mkl, self.vendor, has_avx2()), **MALLOC}

    def all_cores(self) -> dict:
        return {**self.tuned(), "OMP_NUM_THREADS": str(self.cpus), "MKL_NUM_THREADS": str(self.cpus)}

    def pd_settings(self) -> list[str]:
        return [f"Train.fast_mkl_on_amd={str(self.args.fast_mkl).lower()}"]

    # ---- the four runs ------------------------------------------------------------------------------------

    def bare_args(self, data: str, steps: int) -> list[str]:
        a = self.args
        return ["--model", a.model, "--batch-size", str(a.batch_size), "--steps", str(steps),
                "--warmup", str(a.warmup), "--data", data, "--device", a.device]

    def single(self, env: dict, data: str) -> float:
        out = run([sys.executable, BARE, *self.bare_args(data, self.args.steps)], env, self.args.timeout)
        return last_json(out)["images_per_sec"]

    def ceiling(self, data: str, env: Optional[dict] = None) -> float:
        """N copies of the one-process loop at once, each on its own core (paddle's 1 thread) or GPU."""
        procs = []
        for i in range(self.args.nproc):
            env = dict(env or self.tuned())
            if self.args.device == "gpu":
                env["CUDA_VISIBLE_DEVICES"] = str(i)
            procs.append(start([sys.executable, BARE, *self.bare_args(data, self.args.steps)], env))
        rates = [last_json(finish(p, self.args.timeout))["images_per_sec"] for p in procs]
        self.bound = len(rates) * min(rates)
        return sum(rates)

    def bare_launch(self, env: dict, data: str, steps: Optional[int] = None) -> dict:
        log_dir = tempfile.mkdtemp(dir=self.tmp)
        argv = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", log_dir, *self.devices_args(),
                BARE, *self.bare_args(data, steps or self.args.steps)]
        env = {**env, "BENCH_T0": repr(time.time())}
        return last_json(run(argv, env, self.args.timeout))

    def devices_args(self) -> list[str]:
        n = self.args.nproc
        return ["--devices", ",".join(map(str, range(n)))] if self.args.device == "gpu" else ["--nproc_per_node", str(n)]

    def paddledist(self, data: str, overrides=(), env: Optional[dict] = None, epochs: Optional[int] = None) -> float:
        """tools/train.py; images/s of the epochs after the first, from train_result.json."""
        out = tempfile.mkdtemp(dir=self.tmp)
        epochs = epochs or self.args.epochs
        run(self.train_argv(data, out, epochs, [*self.pd_settings(), *overrides]), env or self.plain,
            self.args.timeout)
        with open(os.path.join(out, "train_result.json"), encoding="utf-8") as f:
            history = json.load(f)["history"]
        shutil.rmtree(out, ignore_errors=True)
        return statistics.mean(h["images_per_sec"] for h in history[1:])

    def train_argv(self, data: str, out: str, epochs: int, overrides=()) -> list[str]:
        a = self.args
        dataset = f"synthetic:{a.batch_size * a.nproc * a.epoch_steps}" if data == "synthetic" else data
        device = f"{a.device}:{','.join(map(str, range(a.nproc)))}" if a.nproc > 1 else a.device
        return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Global.model={a.model}", f"Global.dataset_dir={dataset}",
                f"Global.device={device}", f"Global.output={out}", f"Train.batch_size={a.batch_size}",
                f"Train.epochs_iters={epochs}", f"Train.eval_interval={epochs}", f"Train.save_interval={epochs}",
                "Train.warmup_steps=0", f"Train.log_interval={a.epoch_steps}", f"Train.port={free_port_range()}",
                # no inference export beside each checkpoint: the other ranks would wait for rank 0's tracing
                "Train.uniform_output_enabled=false", *overrides]

    # ---- start-up -----------------------------------------------------------------------------------------

    def startup(self) -> dict:
        """Seconds from the command to the end of the first step, seen in rank 0's log file (polled every 20 ms:
        paddle's launcher echoes worker output only every 2 s).

        A rank that reaches paddle's TCP store before rank 0 has opened it retries 3 s later ("Retry to connect"
        in its workerlog): launches take ~4 s or ~7 s by that race. Runs that hit it are marked, and the overhead
        only compares like with like (`startup_overhead`); up to as many extra pairs run until both sides have a
        run of the same kind."""
        runs: dict[str, list[tuple[float, bool]]] = {"bare": [], "pd": []}
        for i in range(2 * self.args.startup_repeats):
            if i >= self.args.startup_repeats and startup_overhead(runs) is not None:
                break
            self._startup_pair(runs)
        result = startup_overhead(runs) or {"bare_launch_s": None, "paddledist_s": None, "overhead_s": None}
        result["store_retries"] = {k: sum(r for _, r in v) for k, v in runs.items()}
        shown = {k: " ".join(f"{t}{'*' if r else ''}" for t, r in v) for k, v in runs.items()}
        print(f"start-up to first step (s; * = paddle's 3 s store retry): bare launch {shown['bare']}, "
              f"paddledist {shown['pd']} -> overhead {result['overhead_s']} s"
              f"{'' if result['overhead_s'] is not None else ' (no two runs of the same kind to compare)'}", flush=True)
        return result

    def _startup_pair(self, runs: dict) -> None:
        log_dir = tempfile.mkdtemp(dir=self.tmp)
        argv = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", log_dir, *self.devices_args(),
                BARE, *self.bare_args("synthetic", 1), "--warmup", "1"]
        wait_quiet(self.args.quiet_wait)
        seconds = time_to_line(argv, self.tuned(), os.path.join(log_dir, "workerlog.0"), "first step",
                               self.args.timeout)
        runs["bare"].append((seconds, store_retried(log_dir)))
        out = tempfile.mkdtemp(dir=self.tmp)
        argv = self.train_argv("synthetic", out, 1, [*self.pd_settings(), "Train.log_interval=1"])
        wait_quiet(self.args.quiet_wait)
        seconds = time_to_line(argv, self.plain, os.path.join(out, "logs", "train.rank0.log"), " iter 1/",
                               self.args.timeout)
        runs["pd"].append((seconds, store_retried(os.path.join(out, "logs"))))

    # ---- probes in a fresh process (their environment decides MKL's code path) ----------------------------

    def probe(self, what: str, env: dict, *extra: str) -> dict:
        return last_json(run([sys.executable, __file__, "--probe", what, *extra], env, self.args.timeout))


# ---- probes ---------------------------------------------------------------------------------------------------

def probe_gemm() -> dict:
    """GFLOP/s of a 1024^3 float32 matrix product on one thread: numpy (OpenBLAS) and paddle (mklml)."""
    import numpy as np
    import paddle

    n, reps = 1024, 10
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    pa, pb = paddle.to_tensor(a), paddle.to_tensor(b)
    rates = {}
    for name, fn in (("numpy", lambda: a @ b), ("paddle", lambda: paddle.matmul(pa, pb).numpy())):
        fn()
        start = time.process_time()
        for _ in range(reps):
            fn()
        rates[name] = round(2 * n ** 3 * reps / (time.process_time() - start) / 1e9, 1)
    return rates


def probe_flops(model_name: str, size: int) -> dict:
    """Multiply-adds of one forward pass (convolutions and linear layers), counted with forward hooks."""
    import numpy as np
    import paddle

    from paddledist.models import build_model

    model, macs = build_model(model_name, 10, size), [0]

    def hook(layer, inputs, output):
        weight = layer.weight
        per_output = int(np.prod(weight.shape[1:])) if isinstance(layer, paddle.nn.Conv2D) else weight.shape[0]
        macs[0] += int(np.prod(output.shape)) * per_output

    for layer in model.sublayers():
        if isinstance(layer, (paddle.nn.Conv2D, paddle.nn.Linear)):
            layer.register_forward_post_hook(hook)
    model.eval()
    model(paddle.zeros([1, 3, size, size]))
    return {"forward_macs": macs[0], "train_flops": 6 * macs[0]}  # forward 2 x MACs; backward about twice that


def probe_loader(data: str, batch_size: int, batches: int) -> dict:
    """paddledist's training loader (decode, augment, normalise, collate) in the main process, as trainers run it."""
    from paddledist.data.formats import load_samples
    from paddledist.data.pipeline import ImageDataset, TrainBatchSampler, Transform, make_loader

    samples = load_samples(data, "train")
    dataset = ImageDataset(samples, Transform(32, True, True))
    sampler = TrainBatchSampler(len(dataset), batch_size, 1, 0, 0)
    sampler.set_epoch(1)
    loader, seen, start = make_loader(dataset, sampler, 0), 0, None
    while seen < batches * batch_size:
        for i, batch in enumerate(loader):
            if start is None:
                start, seen = time.perf_counter(), -batch_size  # the first batch is warm-up
            seen += batch[0].shape[0]
            if seen >= batches * batch_size:
                break
    return {"images_per_sec": round(seen / (time.perf_counter() - start), 1)}


def make_png_folder(root: str, n: int, classes: int = 10) -> str:
    """A ClsDataset of n random 32x32 PNGs (train.txt, val.txt, label.txt, images/)."""
    import numpy as np
    from PIL import Image

    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        label = i % classes
        image = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(image).save(os.path.join(root, "images", f"{i}.png"))
        lines.append(f"images/{i}.png {label}\n")
    with open(os.path.join(root, "train.txt"), "w") as f:
        f.writelines(lines)
    with open(os.path.join(root, "val.txt"), "w") as f:
        f.writelines(lines[: max(1, n // 8)])
    with open(os.path.join(root, "label.txt"), "w") as f:
        f.writelines(f"{k} class{k}\n" for k in range(classes))
    return root


# ---- processes and load -------------------------------------------------------------------------------------

def start(argv: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise SystemExit(f"timed out after {timeout} s: {' '.join(proc.args)}\n{out[-3000:]}")
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(proc.args)}\n{out[-3000:]}")
    return out


def run(argv: list[str], env: dict, timeout: float) -> str:
    return finish(start(argv, env), timeout)


def last_json(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no JSON line in the output:\n{out[-3000:]}")


def time_to_line(argv: list[str], env: dict, path: str, marker: str, timeout: float) -> float:
    """Seconds until `marker` appears in the file at `path`; the command then runs to its end."""
    t0 = time.time()
    proc = subprocess.Popen(argv, env={**env, "BENCH_T0": repr(t0)}, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    seen = None
    while seen is None and proc.poll() is None and time.time() - t0 < timeout:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if marker in f.read():
                    seen = time.time() - t0
        except OSError:
            pass
        time.sleep(0.02)
    proc.wait(timeout=timeout)
    if seen is None or proc.returncode != 0:
        raise SystemExit(f"no {marker!r} in {path} (exit {proc.returncode}): {' '.join(argv)}")
    return round(seen, 2)


def startup_overhead(runs: dict[str, list[tuple[float, bool]]]) -> Optional[dict]:
    """Median start-up of each side and their difference, over runs of one kind: without paddle's 3 s store
    retry where both sides have such runs, else over runs that both hit it; None when the sides share no kind
    (a retried launch against a clean one would show a 3 s difference that is paddle's race, not overhead)."""
    for retried in (False, True):
        use = {k: [t for t, r in v if r == retried] for k, v in runs.items()}
        if use["bare"] and use["pd"]:
            bare, pd = statistics.median(use["bare"]), statistics.median(use["pd"])
            return {"bare_launch_s": round(bare, 2), "paddledist_s": round(pd, 2), "overhead_s": round(pd - bare, 2),
                    "compared": "runs with the store retry" if retried else "runs without the store retry"}
    return None


def store_retried(log_dir: str) -> bool:
    """Whether a rank retried its connection to paddle's TCP store (a 3 s sleep) in this launch's worker logs."""
    for root, _, files in os.walk(log_dir):
        for name in files:
            if name.startswith("workerlog."):
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                    if "Retry to connect" in f.read():
                        return True
    return False


def free_port_range(span: int = 17) -> int:
    """A base port with base..base+span free now (paddledist's own default may be taken by another job)."""
    for base in range(23000, 40000, 97):
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise SystemExit("no free port range found")


def cpu_snapshot() -> Optional[tuple[int, int, float]]:
    """(busy jiffies, all jiffies) of the machine and the CPU seconds of finished children."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + fields[4]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(fields) - idle, sum(fields), usage.ru_utime + usage.ru_stime


def foreign_share(before, after) -> Optional[float]:
    """Share of the machine's CPU time used by processes other than the measured ones."""
    if before is None or after is None or after[1] == before[1]:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy, total, ours = after[0] - before[0], after[1] - before[1], (after[2] - before[2]) * hz
    return max(0.0, (busy - ours) / total)


def wait_quiet(limit_s: float, idle_share: float = 0.9) -> None:
    """Wait (up to limit_s) until the machine is at least idle_share idle over a 2 s window."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        a = cpu_snapshot()
        time.sleep(2)
        b = cpu_snapshot()
        if a is None or b[1] == a[1] or 1 - (b[0] - a[0]) / (b[1] - a[1]) >= idle_share:
            return


# ---- report ---------------------------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    lines = [f"| {'measurement':<52} | {'data':<9} | {'images/s':>9} | {'runs':<24} | foreign |",
             f"|{'-' * 54}|{'-' * 11}|{'-' * 11}|{'-' * 26}|---------|"]
    for r in rows:
        runs = ", ".join(f"{v:.0f}" for v in r.values)
        lines.append(f"| {r.name:<52} | {r.data:<9} | {r.median:>9} | {runs:<24} | {max(r.foreign) * 100:>6.0f}% |")
    return "\n".join(lines)


def plot(rows: list[Row], path: str, title: str) -> Optional[str]:
    """A bar chart of the medians (matplotlib, an optional dependency: skipped when missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", flush=True)
        return None
    labels = [f"{r.name} [{r.data}]" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.2))
    colors = ["#4c72b0" if "paddledist" in r.name else "#c44e52" if "ceiling" in r.name else "#999999" for r in rows]
    ax.barh(labels[::-1], [r.median for r in rows][::-1], color=colors[::-1])
    for i, r in enumerate(rows[::-1]):
        ax.text(r.median, i, f" {r.median:.0f}", va="center", fontsize=8)
    ax.set_xlabel("images/s (median)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


# ---- the run ---------------------------------------------------------------------------------------------------

def synthetic_runs(b: Bench, reps: int) -> dict:
    n, tiny, fast = b.args.nproc, b.args.tiny, b.fast_mkl
    label = ", fast MKL" if fast else ""
    rows = {}
    if not tiny:
        rows["raw"] = b.measure("(a) 1 process, paddle as installed", "synthetic",
                                lambda: b.single(b.plain, "synthetic"), 1, procs=1)
    rows["one"] = b.measure(f"(a) 1 process{label}", "synthetic", lambda: b.single(b.tuned(), "synthetic"), reps,
                            procs=1)
    if not tiny and b.args.device == "cpu":
        rows["all_cores"] = b.measure(f"(a) 1 process{label}, {b.cpus} threads", "synthetic",
                                      lambda: b.single(b.all_cores(), "synthetic"), 1)
    rows["ceiling"], rows["dp"], rows["ratios"] = b.paired(
        (f"(b) {n} independent processes{label} (ceiling)", f"(c) paddledist, {n} ranks{label}"), "synthetic",
        (lambda: b.ceiling("synthetic"), lambda: b.paddledist("synthetic")), b.args.pairs)
    if not tiny:
        rows["bare"] = b.measure(f"(d) bare launch + fleet, {n} ranks, as installed", "synthetic",
                                 lambda: b.bare_launch(b.plain, "synthetic")["images_per_sec"], 1)
    rows["bare_tuned"] = b.measure(f"(d) bare launch + fleet, {n} ranks{label}", "synthetic",
                                   lambda: b.bare_launch(b.tuned(), "synthetic")["images_per_sec"], 1)
    return rows


def variant_runs(b: Bench) -> None:
    """What each setting buys: paddledist with one setting changed at a time."""
    n = b.args.nproc
    for sync in ("reducer", "flat"):
        b.measure(f"(c) paddledist, {n} ranks, Train.grad_sync={sync}", "synthetic",
                  lambda: b.paddledist("synthetic", [f"Train.grad_sync={sync}"]), 1)
    if b.fast_mkl:
        b.measure(f"(c) paddledist, {n} ranks, MKL generic path (default)", "synthetic",
                  lambda: b.paddledist("synthetic", ["Train.fast_mkl_on_amd=false"]), 1)
        b.measure(f"(b) {n} independent processes, MKL generic path", "synthetic",
                  lambda: b.ceiling("synthetic", b.plain), 1)


def real_runs(b: Bench, reps: int) -> dict:
    a, n = b.args, b.args.nproc
    folder = make_png_folder(os.path.join(b.tmp, "pngs"), a.batch_size * n * a.epoch_steps)
    loader = b.probe("loader", b.tuned(), "--data", folder, "--batch-size", str(a.batch_size))["images_per_sec"]
    print(f"loader alone (1 core): {loader} images/s", flush=True)
    ceil, dp, ratios = b.paired((f"(b) {n} independent processes (ceiling)", f"(c) paddledist, {n} ranks"), "pngs",
                                (lambda: b.ceiling(folder), lambda: b.paddledist(folder)), reps)
    b.measure(f"(d) bare launch + fleet, {n} ranks, as installed", "pngs",
              lambda: b.bare_launch(b.plain, folder)["images_per_sec"], 1)
    return {"loader": loader, "ceiling": ceil, "dp": dp, "ratios": ratios}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--nproc", type=int, default=None, help="ranks (default: CPU cores, or 1 per visible GPU)")
    p.add_argument("--model", default="ResNet18")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--quick", action="store_true", help="fewer steps and repeats, no per-setting runs (< 10 min)")
    p.add_argument("--tiny", action="store_true", help="a smoke run: batch 4, a few steps, synthetic data only")
    p.add_argument("--steps", type=int, default=None, help="timed steps of the bare loops")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--epoch-steps", type=int, default=None, help="steps per paddledist epoch")
    p.add_argument("--epochs", type=int, default=None, help="paddledist epochs (the first is warm-up)")
    p.add_argument("--repeats", type=int, default=None, help="runs per measurement, and PNG pairs")
    p.add_argument("--pairs", type=int, default=None, help="ceiling / data-parallel pairs on synthetic data")
    p.add_argument("--fast-mkl", action=argparse.BooleanOptionalAction, default=True,
                   help="MKL's AVX2 path on AMD CPUs (Train.fast_mkl_on_amd) for the tuned runs")
    p.add_argument("--max-foreign", type=float, default=0.1, help="repeat a run when others took more CPU")
    p.add_argument("--quiet-wait", type=float, default=120, help="seconds to wait for an idle machine per run")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--plot", default=None, help="PNG path for a bar chart (needs matplotlib)")
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shape = (6, 6, 2, 1, 1, 1) if args.tiny else (20, 15, 3, 2, 3, 5) if args.quick else (40, 20, 4, 5, 5, 5)
    for name, value in zip(("steps", "epoch_steps", "epochs", "repeats", "startup_repeats", "pairs"), shape):
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.tiny:
        args.batch_size, args.warmup, args.startup_repeats = 4, 2, 1
    if args.nproc is None:
        args.nproc = gpu_count() if args.device == "gpu" else usable_cpus()
    return args


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 1
    return max(1, sum(1 for line in out.splitlines() if line.startswith("GPU ")))


def main(argv=None) -> None:
    args = parse(argv)
    if args.probe:
        result = {"gemm": probe_gemm, "flops": lambda: probe_flops(args.model, 32),
                  "loader": lambda: probe_loader(args.data, args.batch_size, 30)}[args.probe]()
        print(json.dumps(result), flush=True)
        return
    b, started = Bench(args), time.time()
    print(f"{args.model}, batch {args.batch_size} per rank, {args.nproc} ranks on {args.device}; {b.cpus} usable "
          f"CPU cores ({b.vendor or 'unknown vendor'}); load {os.getloadavg()}", flush=True)
    try:
        summary = collect(b)
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)
    summary["elapsed_s"] = round(time.time() - started)
    print()
    print(table(b.rows))
    if args.plot:
        plot(b.rows, args.plot, f"{args.model}, batch {args.batch_size}/rank, {args.nproc} {args.device} ranks")
    print(json.dumps(summary))


def collect(b: Bench) -> dict:
    a, reps = b.args, b.args.repeats
    gemm = gemm_generic = None
    if not a.tiny:
        gemm = b.probe("gemm", b.tuned())  # one thread: the per-core rate
        gemm_generic = b.probe("gemm", b.plain)
    flops = b.probe("flops", b.plain)["train_flops"]
    syn = synthetic_runs(b, reps)
    if not a.quick and not a.tiny:
        variant_runs(b)
    real = real_runs(b, reps) if not a.tiny else None
    startup = b.startup() if not a.tiny else None
    dp, ceiling = syn["dp"].median, syn["ceiling"].median
    singles = [syn[k].median for k in ("raw", "one", "all_cores", "bare") if k in syn]
    summary = {
        "model": a.model, "batch_per_rank": a.batch_size, "ranks": a.nproc, "device": a.device,
        "fast_mkl": b.fast_mkl,
        "efficiency": round(statistics.median(syn["ratios"]), 3), "efficiency_pairs": syn["ratios"],
        "efficiency_vs_slowest_process": _median(b.bound_ratios.get("synthetic")),
        "ceiling_images_per_sec": ceiling, "dp_images_per_sec": dp,
        "raw_paddle_images_per_sec": max(singles),
        **{f"{k}_images_per_sec": syn[k].median for k in ("raw", "one", "all_cores", "bare", "bare_tuned") if k in syn},
        "startup": startup, "gemm_gflops_one_core": gemm, "gemm_gflops_one_core_as_installed": gemm_generic,
        "train_gflop_per_image": round(flops / 1e9, 3),
    }
    if a.device == "cpu":
        summary["train_gflops_per_core"] = round(dp * flops / 1e9 / b.cpus, 1)
        if gemm:
            summary["share_of_numpy_gemm"] = round(summary["train_gflops_per_core"] / gemm["numpy"], 2)
    if real:
        summary.update(real_efficiency=round(statistics.median(real["ratios"]), 3),
                       real_efficiency_vs_slowest_process=_median(b.bound_ratios.get("pngs")),
                       real_dp_images_per_sec=real["dp"].median, real_ceiling_images_per_sec=real["ceiling"].median,
                       loader_images_per_sec_one_core=real["loader"])
    summary["foreign_load_max"] = round(max(max(r.foreign) for r in b.rows), 2)
    return summary


def _median(values) -> Optional[float]:
    return round(statistics.median(values), 3) if values else None


if __name__ == "__main__":
    main()

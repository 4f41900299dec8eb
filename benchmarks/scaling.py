"""Data-parallel scaling of paddledist against the machine's ceiling and against plain paddle, in one run.

    python benchmarks/scaling.py --quick                       # CPU, one rank per core (here 2), < 10 min
    python benchmarks/scaling.py                               # more steps, 5 repeats, and each setting's effect
    python benchmarks/scaling.py --device gpu --nproc 8        # one GPU per rank (NCCL), same measurements
    python benchmarks/scaling.py --hosts 2 --link-mbit 1000 --quick Train.grad_compression=bf16
                                  # two namespace hosts on a shaped link (root; bench_hosts.py); extra
                                  # arguments are -o overrides for the data-parallel run

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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

from bench_procs import ROOT  # noqa: E402  (this folder is first on sys.path: the benchmark's own modules)

sys.path.insert(0, ROOT)

from paddledist.engine.cpu import MALLOC, cpu_env, cpu_vendor, has_avx2, usable_cpus  # noqa: E402  (no paddle)

BARE = os.path.join(ROOT, "benchmarks", "bare_fleet.py")
TRAIN = os.path.join(ROOT, "tools", "train.py")
CONFIG = os.path.join(ROOT, "configs", "image_classification.yaml")
TUNING_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DEBUG_CPU_TYPE", *MALLOC)
"""Removed from every run's environment; the runs that want them set them."""

from bench_probes import make_png_folder, probe_flops, probe_gemm, probe_loader  # noqa: E402
from bench_procs import (cpu_snapshot, finish, foreign_share, free_port_range, last_json, run, start,  # noqa: E402
                         startup_overhead, store_retried, time_to_line, wait_quiet)
from bench_report import Row, plot, table  # noqa: E402


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
        if not self.args.tiny:  # a smoke run only checks that everything runs
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
            bound = ""
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
        if self.args.device == "gpu":
            return ["--devices", ",".join(map(str, range(n)))]
        return ["--nproc_per_node", str(n)]

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
    p.add_argument("--hosts", type=int, default=0, help="network-namespace hosts, one rank each (needs root)")
    p.add_argument("--link-mbit", type=float, default=10000, help="with --hosts: the link's rate (tc tbf)")
    p.add_argument("overrides", nargs="*", help="-o overrides for the data-parallel run (with --hosts)")
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shape = (6, 6, 2, 1, 1, 1) if args.tiny else (20, 15, 3, 2, 3, 5) if args.quick else (40, 20, 4, 5, 5, 5)
    for name, value in zip(("steps", "epoch_steps", "epochs", "repeats", "startup_repeats", "pairs"), shape):
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.tiny:
        args.batch_size, args.warmup, args.startup_repeats = 4, 2, 1
    if args.hosts:
        args.nproc = args.hosts
    elif args.nproc is None:
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
    if args.hosts:
        from bench_hosts import main_hosts  # imports this module

        return main_hosts(args)
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

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
import time
from typing import Optional

from bench_base import Bench
from bench_hosts import main_hosts
from bench_probes import make_png_folder, probe_flops, probe_gemm, probe_loader
from bench_report import plot, table

from paddledist.engine.cpu import usable_cpus  # no paddle

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

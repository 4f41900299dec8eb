"""The scaling benchmarks' measurements (class Bench): the runs of one setting, their environment, and the
pairs of ceiling and data-parallel runs; scaling.py (one machine) and bench_hosts.py (namespace hosts) drive it.
The package is imported installed (`pip install -e .`), never from a path edit."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Optional

from bench_procs import (ROOT, cpu_snapshot, finish, foreign_share, free_port_range, last_json, run, start,
                         startup_overhead, store_retried, time_to_line, wait_quiet)
from bench_report import Row

from paddledist.engine.cpu import MALLOC, cpu_env, cpu_vendor, has_avx2, usable_cpus  # no paddle

BARE = os.path.join(ROOT, "benchmarks", "bare_fleet.py")
SCALING = os.path.join(ROOT, "benchmarks", "scaling.py")
TRAIN = os.path.join(ROOT, "tools", "train.py")
CONFIG = os.path.join(ROOT, "configs", "image_classification.yaml")
TUNING_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DEBUG_CPU_TYPE", *MALLOC)
"""Removed from every run's environment; the runs that want them set them."""



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
        return last_json(run([sys.executable, SCALING, "--probe", what, *extra], env, self.args.timeout))

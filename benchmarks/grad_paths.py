"""One gradient path? The shared-memory exchange against the best of paddle's collectives, on one machine.

    python benchmarks/grad_paths.py --quick          # ~10 min here; last line is a JSON summary
    python benchmarks/grad_paths.py --tiny           # a smoke run

paddledist data parallel on this machine's cores (tools/train.py, ResNet18, synthetic data, --quick sizes of
scaling.py), with every gradient crossing processes through paddle's collectives (Train.grad_sync=bucket:
bucketed all-reduces overlapped with backward; flat: one all-reduce after backward; paddle's DataParallel
reducer is left out, slower than flat in every earlier run, docs/benchmarks.md), and through the shared-memory
exchange with its shared optimizer step (Train.grad_sync=shm).
First one run of each collective path picks the fastest; then that path and shm run in --pairs alternating
pairs (ABBA, after one warm-up run), and `shm_over_collective` is the median of the per-pair ratios.
`keep_shm` is whether shm is at least 5% faster: the bar issue 21 set for keeping a private exchange.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time

from bench_base import Bench
from scaling import parse

COLLECTIVE = ("bucket", "flat")
KEEP_BAR = 1.05


def main(argv=None) -> None:
    args = parse(argv)
    b, started = Bench(args), time.time()
    load = [os.getloadavg()]
    print(f"{args.model}, batch {args.batch_size} per rank, {args.nproc} ranks on one machine; load {load[0]}",
          flush=True)

    def path(sync: str):
        return lambda: b.paddledist("synthetic", [f"Train.grad_sync={sync}"])

    try:
        summary = compare(b, path)
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)
    load.append(os.getloadavg())
    print(json.dumps({**summary, "load": load, "elapsed_s": round(time.time() - started)}))


def compare(b: Bench, path) -> dict:
    first = {s: b.measure(f"(c) paddledist, Train.grad_sync={s}", "synthetic", path(s), 1).median for s in COLLECTIVE}
    best = max(first, key=first.get)
    collective, shm, ratios = b.paired((f"(c) Train.grad_sync={best} (paired)", "(c) Train.grad_sync=shm (paired)"),
                                       "synthetic", (path(best), path("shm")), b.args.pairs)
    ratio = round(statistics.median(ratios), 3)
    return {"collective_path": best, "first_runs": first, "collective_images_per_sec": collective.median,
            "shm_images_per_sec": shm.median, "shm_over_collective": ratio, "pairs": ratios,
            "keep_shm": ratio >= KEEP_BAR, "foreign_load_max": round(max(max(r.foreign) for r in b.rows), 2)}


if __name__ == "__main__":
    sys.exit(main())

"""One rank of a real 2-process job (run under paddle.distributed.launch by tests/test_paddle_internals.py):
global_all_reduce's computing check with the world size given on the command line, then what Train.grad_sync=auto
would choose for CPU ranks on two machines. Prints one JSON line per rank."""

from __future__ import annotations

import json
import sys

import paddle.distributed as pdist

from paddledist import paddle_internals as internals
from paddledist.engine import sync as gradsync
from paddledist.engine.distenv import DistEnv

if __name__ == "__main__":
    pdist.init_parallel_env()
    rank, world = pdist.get_rank(), pdist.get_world_size()
    why = internals.check_global_all_reduce(int(sys.argv[1]))
    missing = internals.with_job_checks({"global_all_reduce": why})
    chosen = gradsync.choose("auto", "cpu", DistEnv(rank, world, nnodes=2), 1000, 1 << 40, arch="x86_64",
                             missing=missing)
    print(json.dumps({"rank": rank, "missing": missing("global_all_reduce"), "chosen": chosen}), flush=True)

"""A tiny entry script that exercises the launch path without the trainer.

    python tests/fleet_probe.py [-o Train.dist_ips=A,B Global.device=cpu:0,1 Global.output=DIR ...] [--dry-run]

Outside a worker it launches itself like tools/train.py would; in each worker it joins the collective
group, all-reduces (rank + 1) and a per-rank random tensor broadcast from rank 0, and writes
<Global.output>/probe.<rank>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddledist.config import load  # noqa: E402
from paddledist.errors import USER_ERROR_EXIT, UserError  # noqa: E402
from paddledist.launch import launch_stage, needs_launch  # noqa: E402


def work(output: str) -> None:
    import paddle
    import paddle.distributed as dist
    from paddle.distributed import fleet

    fleet.init(is_collective=True)
    rank, world = dist.get_rank(), dist.get_world_size()
    total = paddle.to_tensor([float(rank + 1)])
    dist.all_reduce(total)
    paddle.seed(1000 + rank)  # different on every rank until the broadcast
    weights = paddle.rand([4])
    dist.broadcast(weights, src=0)
    result = {"rank": rank, "world_size": world, "sum": float(total.numpy()[0]),
              "weights": [float(w) for w in weights.numpy()], "node": os.environ.get("PADDLE_CURRENT_ENDPOINT")}
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, f"probe.{rank}.json"), "w") as f:
        json.dump(result, f)
    print("probe", json.dumps(result), flush=True)
    time.sleep(float(os.environ.get("PROBE_HOLD_S", "0")))  # lets a test look at live connections
    if os.environ.get("PROBE_FAIL_RANK") == str(rank):
        raise SystemExit(3)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-o", action="append", nargs="+", default=[])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    overrides = [item for group in args.o for item in group]
    try:
        cfg = load(None, overrides)
        if needs_launch(cfg, os.environ):
            forwarded = [a for a in argv if a != "--dry-run"]
            return launch_stage(cfg, os.path.abspath(__file__), forwarded, args.dry_run).code
    except UserError as e:
        print(f"paddledist: error: {e}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT
    work(cfg.Global.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

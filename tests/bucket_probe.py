"""One rank of a real 2-process job (run under paddle.distributed.launch by tests/test_bucketsync.py): the bucket
sync on a small model over paddle's gloo group. Rank 0 never uses the second head, rank 1 is slow in backward,
each update accumulates 3 micro-batches under skip(). Prints one JSON line per rank."""

from __future__ import annotations

import contextlib
import json
import sys
import time

import numpy as np
import paddle
import paddle.distributed as pdist

from paddledist.engine.sync.bucket import BucketSync
from paddledist.engine.distenv import DistEnv


def bucket_holds(sync: BucketSync, k: int, param) -> bool:
    """Whether param's gradient memory lies inside its bucket's buffer, at its own slice."""
    b, start, end = sync.where[k]
    base, ptr = sync.flat[b].data_ptr(), param.grad.data_ptr()
    return base + 4 * start == ptr and ptr + 4 * (end - start) <= base + 4 * int(sync.flat[b].shape[0])


def loss_of(layers, x, rank: int):
    """Rank 0 leaves head_b unused (its gradient is sent as zeros)."""
    body, head_a, head_b = layers
    h = body(x)
    return head_a(h).square().sum() + (head_b(h).square().sum() if rank else 0)


def main(compression: str) -> None:
    pdist.init_parallel_env()
    rank, world = pdist.get_rank(), pdist.get_world_size()
    paddle.seed(0)
    body, head_a, head_b = paddle.nn.Linear(8, 300), paddle.nn.Linear(300, 4), paddle.nn.Linear(300, 4)
    params = [*body.parameters(), *head_a.parameters(), *head_b.parameters()]
    sync = BucketSync(params, DistEnv(rank, world), bucket_mb=0.002, compression=compression)  # 524 floats each
    optimizer = paddle.optimizer.SGD(parameters=params)  # only its gradients are cleared
    # The local gradients are read from a twin without the sync: the synced buckets are all-reduced in place
    # while backward still runs, so reading them after backward could see part of the sum (it did, under load).
    twin = [paddle.nn.Linear(8, 300), paddle.nn.Linear(300, 4), paddle.nn.Linear(300, 4)]
    for copy, layer in zip(twin, (body, head_a, head_b)):
        copy.set_state_dict(layer.state_dict())
    twin_params = [p for layer in twin for p in layer.parameters()]
    local, mean, sent_after_skips, inside = [], [], [], []
    for step in range(3):
        for m in range(3):
            x = paddle.to_tensor(np.random.default_rng(100 * step + 10 * rank + m).normal(size=(5, 8)), "float32")
            loss = loss_of((body, head_a, head_b), x, rank)
            loss_of(twin, x, rank).backward()
            with sync.skip() if m < 2 else contextlib.nullcontext():
                if rank == 1:
                    time.sleep(0.2)
                loss.backward()
            if m < 2:
                sent_after_skips.append(sync.sent)
        local.append([np.zeros(p.shape).tolist() if p.grad is None else p.grad.numpy().tolist() for p in twin_params])
        for p in twin_params:
            p.clear_gradient(False)
        sync()
        mean.append([p.grad.numpy().tolist() for p in params])
        inside.append(all(bucket_holds(sync, k, p) for k, p in enumerate(sync.params)))
        sync.clear(optimizer)
    print(json.dumps({"rank": rank, "buckets": len(sync.buckets), "sent": sync.sent, "exchanges": sync.exchanges,
                      "sent_after_skips": sent_after_skips, "local": local, "mean": mean, "inside": inside,
                      "views": sync.views}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

"""paddle's own DataParallel reducer (Train.grad_sync=reducer; auto on GPU): bucketed all-reduces inside
backward, over NCCL on GPU. Nothing is left to do after backward, so its sync is NoSync with the model's no_sync."""

from __future__ import annotations

from paddledist.engine.sync.none import NoSync


def wrap(model, optimizer):
    """(model, optimizer, sync) wrapped by fleet, as PaddleX's trainer does for collective jobs."""
    from paddle.distributed import fleet

    model, optimizer = fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)
    return model, optimizer, NoSync(model)

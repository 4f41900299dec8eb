"""tools/train.py plus, on every rank, a digest of the final parameters: <Global.output>/params.rank<R>.json.

Test-only: the trainer writes weights on rank 0 alone, and multi-host tests must show all ranks ended with
identical parameters. The launcher re-executes this file (sys.argv[0]) in every worker, like tools/train.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddledist.cli import main  # noqa: E402


def write_digest(trainer) -> None:
    layer = getattr(trainer.model, "_layers", trainer.model)
    digest, total = hashlib.sha256(), 0.0
    for name, value in sorted(layer.state_dict().items()):
        array = value.numpy()
        digest.update(name.encode() + array.tobytes())
        total += float(array.astype("float64").sum())
    path = os.path.join(trainer.cfg.Global.output, f"params.rank{trainer.dist.rank}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"rank": trainer.dist.rank, "world_size": trainer.dist.world_size, "sha256": digest.hexdigest(),
                   "sum": total}, f)


def install() -> None:
    from paddledist.engine.trainer import Trainer

    train = Trainer.train

    def train_then_digest(self, *args, **kwargs):
        result = train(self, *args, **kwargs)
        write_digest(self)
        return result

    Trainer.train = train_then_digest


if __name__ == "__main__":
    if "PADDLE_TRAINER_ID" in os.environ:  # only workers train; the launching process must stay light
        install()
    sys.exit(main(mode="train", prog="tests/train_with_digest.py"))

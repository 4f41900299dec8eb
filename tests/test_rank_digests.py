"""Every rank of a local 2-process job ends with the same parameters: the test reads each rank's logged digest
and compares them itself (and with the weights rank 0 saved). Run once per gradient exchange that keeps a
private copy of the parameters in each process (flat all-reduce, paddle's reducer), where ranks could drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent


def digest_of(log: Path) -> str:
    found = re.findall(r"final parameter digest: ([0-9a-f]{64})", log.read_text())
    assert len(found) == 1, log
    return found[0]


@pytest.mark.parametrize("sync", ["flat", "bucket", "reducer"])
def test_both_ranks_end_with_the_same_parameters(tmp_path, sync):
    from helpers.hosts import digest_of_saved_weights

    out = tmp_path / "out"
    argv = [sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" / "image_classification.yaml"),
            "-o", f"Global.output={out}", f"Global.dataset_dir={REPO / 'dataset' / 'digits'}", "Global.device=cpu:0,1",
            "Train.epochs_iters=1", f"Train.grad_sync={sync}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"gradient sync: {sync} (Train.grad_sync={sync})" in (out / "logs" / "train.rank0.log").read_text()
    digests = [digest_of(out / "logs" / f"train.rank{r}.log") for r in (0, 1)]
    assert digests[0] == digests[1] == digest_of_saved_weights(out / "latest" / "latest.pdparams")

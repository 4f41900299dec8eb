"""Multi-host runs: start the same command on every host, collect outputs and parameter digests."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from helpers.netns import NetnsHosts


REPO = Path(__file__).resolve().parents[2]


TRAIN = str(REPO / "tools" / "train.py")


CONFIG = str(REPO / "configs" / "image_classification.yaml")


DATA = str(REPO / "dataset" / "digits")


def start_all(hosts: NetnsHosts, which, argv_for, tmp_path: Path) -> dict[int, subprocess.Popen]:
    procs = {}
    for i in which:
        log = open(tmp_path / f"host{i}.txt", "w")
        procs[i] = hosts.popen(i, argv_for(i), cwd=str(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    return procs


def finish(procs: dict[int, subprocess.Popen], tmp_path: Path, timeout: float = 240) -> dict[int, tuple[int, str]]:
    done = {}
    for i, proc in procs.items():
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        done[i] = (code, (tmp_path / f"host{i}.txt").read_text())
    return done


def final_digest(rank_log: Path) -> str:
    found = re.findall(r"final parameter digest: ([0-9a-f]{64})", rank_log.read_text())
    assert len(found) == 1, f"{rank_log}: expected one digest line"
    return found[0]


def digest_of_saved_weights(path: Path) -> str:
    import hashlib

    import paddle

    digest = hashlib.sha256()
    for name, value in sorted(paddle.load(str(path)).items()):
        digest.update(name.encode() + value.numpy().tobytes())
    return digest.hexdigest()

"""benchmarks/scaling.py --hosts 2 --link-mbit M: two namespace hosts on a shaped link, end to end at a tiny size.

No timing is asserted; what is: the link is shaped to the asked rate, the data-parallel run's gradients cross it
(bytes counted on the bridge), and Train.grad_compression=bf16 passed through as an override halves them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.common import unavailable
from helpers.netns import NetnsHosts, NetnsUnavailable

pytestmark = [pytest.mark.bench, pytest.mark.multihost]

REPO = Path(__file__).resolve().parent.parent
RESNET18_GRAD_BYTES = 44.7e6  # 11.2 M float32 gradients (the job's log line names the same 44.7 MB)


def test_shaped_link_benchmark_runs_and_bf16_halves_the_bytes_on_the_link():
    try:
        NetnsHosts(1).__enter__().close()
    except NetnsUnavailable as e:
        unavailable(str(e))
    argv = ["--hosts", "2", "--link-mbit", "1000", "--tiny", "--steps", "2", "--epoch-steps", "3", "--quiet-wait", "0",
            "--max-foreign", "1", "Train.grad_compression=bf16"]
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scaling.py"), *argv], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    s = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("efficiency", "dp_images_per_sec", "ceiling_images_per_sec", "raw_paddle_images_per_sec"):
        assert s[key] > 0, key
    assert s["hosts"] == 2 and s["grad_sync"] == "bucket" and s["overrides"] == ["Train.grad_compression=bf16"]
    assert 500 < s["link_measured_mbit"] < 1100  # shaped: an unshaped veth carries several Gbit/s
    assert s["bytes_per_step"] == pytest.approx(RESNET18_GRAD_BYTES / 2, rel=0.01)
    # what host 0 (rank 0) really sent per step: bf16 gradients, plus its start-up broadcast of the fp32
    # parameters spread over the 6 steps of a tiny run (~7.5 MB a step): well under the 44.7 MB of fp32 alone
    assert 0.45 * RESNET18_GRAD_BYTES < s["tx_bytes_per_step_measured"] < 0.8 * RESNET18_GRAD_BYTES
    assert 0 < s["link_bound"] <= 1
    # the transport's own cost: one step's bytes both ways over plain sockets between the same hosts
    assert 0 < s["transport_cpu_s"] <= s["transport_wall_s"] * 2 and 0 < s["transport_bound"] < 1
    assert s["efficiency_vs_transport_bound"] == pytest.approx(s["efficiency"] / s["transport_bound"], rel=0.01)
    assert s["transport_softirq_s"] >= 0 and s["transport_bound_with_softirq"] <= s["transport_bound"]
    assert s["efficiency_vs_transport_bound_with_softirq"] == pytest.approx(
        s["efficiency"] / s["transport_bound_with_softirq"], rel=0.01)
    assert "| (d) bare launch + fleet, 2 hosts x 1 rank" in done.stdout

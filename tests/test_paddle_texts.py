"""The texts of paddle's that launch/runner.py matches (launch/paddle_texts.py), pinned against the real
paddle.distributed.launch and gloo: a rank exits with a code of its own, and its peer, blocked in an all_reduce,
fails with one of gloo's broken-collective strings. If a paddle upgrade rewords them, this fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from paddledist.launch import paddle_texts

WORKER = textwrap.dedent("""
    import os, sys, time
    import paddle, paddle.distributed as dist
    dist.init_parallel_env()
    x = paddle.ones([4])
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        os._exit(7)
    dist.all_reduce(x)  # the peer is gone: gloo fails here
""")


@pytest.mark.multiproc
def test_the_real_launcher_and_gloo_print_what_the_runner_matches(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    logs = tmp_path / "logs"
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
                           "--log_dir", str(logs), str(script)], capture_output=True, text=True, timeout=180,
                          env=env, cwd=tmp_path)
    text = proc.stdout + proc.stderr
    failed = [f for f in map(paddle_texts.rank_failed, text.splitlines()) if f]
    assert failed, text[-3000:]
    assert (1, 7, str(logs / "workerlog.1")) in failed, failed
    rank0 = (logs / "workerlog.0").read_text(errors="replace").splitlines()
    assert paddle_texts.collective_broke(rank0), "\n".join(rank0[-30:])


@pytest.mark.unit
def test_own_error_finds_the_last_paddledist_line():
    lines = ["x", "paddledist: error: first", "[rank0] paddledist: error: cannot write /o/latest: No space left"]
    assert paddle_texts.own_error(lines) == "cannot write /o/latest: No space left"
    assert paddle_texts.own_error(["Traceback"]) is None

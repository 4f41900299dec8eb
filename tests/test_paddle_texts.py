"""The texts of paddle's that launch/runner.py matches (launch/paddle_texts.py), pinned against the real
paddle.distributed.launch and gloo: a rank exits with a code of its own, and its peer, blocked in an all_reduce,
fails with one of gloo's broken-collective strings. If a paddle upgrade rewords them, this fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from paddledist.launch import paddle_texts

pytestmark = pytest.mark.compat  # the pins must hold on every supported paddle (.ci/compat)

WORKER = textwrap.dedent("""
    import os, sys, time
    import paddle, paddle.distributed as dist
    dist.init_parallel_env()
    x = paddle.ones([4])
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        os._exit(int(sys.argv[3]))
    time.sleep(float(sys.argv[1]))
    if sys.argv[2] == "barrier":
        dist.barrier()  # the peer is gone: gloo fails here (paddledist waits in one after each epoch's checkpoints)
    else:
        dist.all_reduce(x)  # the peer is gone: gloo fails here
""")


def launch(tmp_path, delay: float, op: str = "all_reduce", code: int = 7):
    """Two real ranks through paddle's launcher: rank 1 exits `code` after a first all_reduce; rank 0, `delay` s
    later, blocks in a second one. -> (the launcher's failed-rank lines parsed, rank 0's log lines).

    A rank that exits 0 leaves the launcher watching (it ends the others only when one fails): the gloo-text
    tests use that, or the launcher's SIGTERM could reach rank 0 before gloo noticed its peer had gone."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    logs = tmp_path / f"logs{delay}{op}"
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
                           "--log_dir", str(logs), str(script), str(delay), op, str(code)],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    text = proc.stdout + proc.stderr
    failed = [f for f in map(paddle_texts.rank_failed, text.splitlines()) if f]
    assert failed, text[-3000:]
    return failed, logs, (logs / "workerlog.0").read_text(errors="replace").splitlines()


@pytest.mark.multiproc
def test_the_real_launcher_names_a_failed_rank_with_its_code_and_log(tmp_path):
    """Rank 0 waits, so the launcher sees rank 1's exit first (and then ends rank 0)."""
    failed, logs, _ = launch(tmp_path, 3.0)
    assert (1, 7, str(logs / "workerlog.1")) in failed, failed


@pytest.mark.multiproc
def test_gloo_prints_a_broken_collective_text_the_runner_matches(tmp_path):
    """Rank 0 goes straight into the all_reduce whose peer is gone: gloo's error is in its log."""
    failed, logs, rank0 = launch(tmp_path, 0.0, code=0)
    assert paddle_texts.collective_broke(rank0), "\n".join(rank0[-30:])
    assert all(log.startswith(str(logs)) for _, _, log in failed), failed


@pytest.mark.multiproc
def test_a_barrier_whose_peer_is_gone_is_a_broken_collective_too(tmp_path):
    failed, _, rank0 = launch(tmp_path, 0.0, "barrier", code=0)
    assert [rank for rank, _, _ in failed] == [0], failed
    assert paddle_texts.collective_broke(rank0), "\n".join(rank0[-30:])


@pytest.mark.unit
def test_own_error_finds_the_last_paddledist_line():
    lines = ["x", "paddledist: error: first", "[rank0] paddledist: error: cannot write /o/latest: No space left"]
    assert paddle_texts.own_error(lines) == "cannot write /o/latest: No space left"
    assert paddle_texts.own_error(["Traceback"]) is None


@pytest.mark.unit
def test_a_gloo_pair_timeout_is_a_broken_collective():
    """Rank 1's barrier on a namespace host after rank 0 died of a full disk (tests/test_disk_full.py), as gloo
    printed it: it must not count as rank 1 failing on its own (it would be told as the job's cause)."""
    line = ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 1 "
            "pair_rank = 0 peer_str = [10.78.235.1]:7046")
    assert paddle_texts.collective_broke(["Traceback (most recent call last):", line])
    assert not paddle_texts.collective_broke(["RuntimeError: (InvalidArgument) shape mismatch"])


@pytest.mark.unit
def test_a_worker_whose_collective_broke_prints_one_line_and_any_other_error_is_raised(capsys):
    """A rank whose peer went away says so in one line that still carries gloo's words (the runner reads them);
    its stack goes to its log file only. tests/test_disk_full.py's two-host case checks it end to end."""
    from paddledist.stages import _collective_broke

    gloo = RuntimeError("[/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 1 "
                        "pair_rank = 0 peer_str = [10.78.235.1]:7046")
    assert _collective_broke(gloo, 1) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("paddledist: rank 1: a collective with the other ranks broke")
    assert paddle_texts.collective_broke(err)
    own = RuntimeError("(InvalidArgument) shape mismatch")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        _collective_broke(own, 0)

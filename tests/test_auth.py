"""cluster/auth.py: the job secret (from Train.job_secret_file or PADDLEDIST_JOB_SECRET), checked in one line, never
handed to the workers or printed. What the secret guards (the job's etcd with authentication) is tested on real
etcd members in tests/test_etcd_embedded_multihost.py."""

from __future__ import annotations

import dataclasses
import os

import pytest

from paddledist.cluster import ClusterPlan
from paddledist.cluster.auth import SECRET_ENV, job_secret
from paddledist.config import DeviceSpec
from paddledist.errors import UserError
from paddledist.launch.builder import launcher_env

pytestmark = pytest.mark.unit

SECRET = b"0123456789abcdef0123456789abcdef"
NODES = ("127.0.0.1", "127.0.0.2")


def node(rank: int, port: int, secret=None, timeout: int = 15) -> ClusterPlan:
    return ClusterPlan(nodes=NODES, node_rank=rank, ifname="lo", device=DeviceSpec("cpu", (0,)), port=port,
                       job_id="t", peer_timeout=timeout, source="test", secret=secret)


# --- the secret ------------------------------------------------------------------------------------------

def test_the_secret_comes_from_the_file_first_then_the_variable(tmp_path):
    path = tmp_path / "secret"
    path.write_text("from-the-file-0123456789\n")
    path.chmod(0o600)
    env = {SECRET_ENV: "from-the-variable-0123456789"}
    assert job_secret(str(path), env) == b"from-the-file-0123456789"
    assert job_secret(None, env) == b"from-the-variable-0123456789"
    assert job_secret(None, {}) is None


@pytest.mark.parametrize("mode, text, words", [
    (0o644, "a-long-enough-secret-0123", "can be read by others (mode 644); run chmod 600"),
    (0o640, "a-long-enough-secret-0123", "can be read by others (mode 640)"),
    (0o600, "short", "shorter than 16 characters"),
    (0o600, "", "shorter than 16 characters"),
])
def test_a_bad_secret_file_is_one_line(tmp_path, mode, text, words):
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        job_secret(str(path), {})
    with pytest.raises(UserError, match="cannot be read"):
        job_secret(str(tmp_path / "missing"), {})
    with pytest.raises(UserError, match="shorter than 16"):
        job_secret(None, {SECRET_ENV: "tiny"})


def test_the_workers_never_see_the_secret():
    env = launcher_env(node(0, 6170), {SECRET_ENV: SECRET.decode(), "PATH": "/bin"})
    assert SECRET_ENV not in env and env["PATH"] == "/bin"


def test_the_job_secret_variable_reaches_the_plan_of_a_dry_run(tmp_path):
    from paddledist.launch import stage
    from paddledist.config import load
    cfg = load(None, [f"Train.job_secret_file={tmp_path / 'missing'}"])
    with pytest.raises(UserError, match="Train.job_secret_file .* cannot be read"):
        stage.launch_stage(cfg, os.path.abspath(__file__), [], dry_run=True)
    plan = dataclasses.replace(node(0, 1), secret=SECRET)
    assert "0123456789abcdef" not in repr(plan)

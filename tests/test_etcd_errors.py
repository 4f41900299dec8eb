"""A user's etcd that cannot be used stops the job at once with one line: unreachable (naming the endpoint, within
Train.peer_timeout) and wrong credentials (naming the user, never the password). A real etcd on a namespace host."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers.etcd import etcdctl, start_cluster, wait_healthy
from helpers.failures import CONFIG, TRAIN
from helpers.netns import netns_hosts  # noqa: F401  (fixture)

pytestmark = pytest.mark.multihost


def train(hosts, tmp_path, master: str, env=None) -> subprocess.CompletedProcess:
    argv = [sys.executable, TRAIN, "-c", CONFIG, "-o", "Train.nnodes=2", "Train.peer_timeout=3",
            "Global.output=out", "Train.epochs_iters=1", f"Train.dist_master={master}"]
    return hosts.run(0, argv, cwd=str(tmp_path), env=env, timeout=120)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("paddledist: error:")]


def test_an_unreachable_etcd_is_named_within_the_peer_timeout(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(1)
    started = time.monotonic()
    done = train(hosts, tmp_path, f"etcd://{hosts.addresses[0]}:2379")
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [line] = error_lines(done)
    assert f"etcd://{hosts.addresses[0]}:2379" in line and "unreachable" in line and "3s" in line, line
    assert took < 3 + 20, took  # bounded by Train.peer_timeout, plus start-up


def test_wrong_etcd_credentials_are_one_line_naming_the_user(netns_hosts, tmp_path):  # noqa: F811
    hosts = netns_hosts(1)
    start_cluster(hosts.popen, hosts.addresses, (0,), str(tmp_path))
    endpoint = f"http://{hosts.addresses[0]}:2379"
    run = lambda argv: hosts.run(0, argv)  # noqa: E731
    wait_healthy(run, endpoint)
    for args in (("user", "add", "root:rootpw"), ("user", "add", "job:jobpw"), ("role", "add", "job"),
                 ("role", "grant-permission", "job", "--prefix=true", "readwrite", "/paddledist/"),
                 ("user", "grant-role", "job", "job"), ("auth", "enable")):
        assert etcdctl(run, endpoint, *args).returncode == 0, args
    env = {**os.environ, "ETCDCTL_USER": "job:not-the-password"}
    done = train(hosts, tmp_path, f"etcd://{hosts.addresses[0]}:2379", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "not-the-password" not in done.stdout + done.stderr
    [line] = error_lines(done)
    assert "refused user 'job'" in line and "ETCDCTL_PASSWORD" in line, line

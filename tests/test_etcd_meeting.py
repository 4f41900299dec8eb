"""Machines meet in a real etcd (one member on loopback, the machines' plans in process): a machine that comes
later than Train.heartbeat_timeout after the first still meets it, because a lease is renewed from the moment it
is granted, not only once the launch runs; a closed view stops following at once; a fixed list that lost a
machine waits for it at the restart rather than going on without it; node 0's launcher port in use stops every
machine with one line before anything is launched; a machine whose ranks failed on their own is named by the
others as stopped; the job's own etcd forms again after a run whose member on one machine was killed, leaving
its data behind; and with one member, its machine is named lost when it stops answering."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from typing import Optional

import pytest

from helpers.common import free_port
from helpers.etcd import loopback_member, planned as etcd_plan
from paddledist.cluster.etcdjob import EtcdJob
from paddledist.cluster.etcdlink import Store
from paddledist.cluster.hello import Hello
from paddledist.cluster.jobkeys import put, read_prefix
from paddledist.cluster.liveness import EtcdPeers
from paddledist.cluster.meeting import meet
from paddledist.errors import UserError

pytestmark = pytest.mark.multiproc

LISTED = ("10.0.0.1", "10.0.0.2")


@pytest.fixture
def store(tmp_path):
    proc, endpoint = loopback_member(str(tmp_path))
    try:
        yield Store((endpoint,))
    finally:
        proc.kill()
        proc.wait()


def planned(me: int):
    return etcd_plan(LISTED, me, "Train.job_id=meet", "Train.heartbeat_interval=0.5", "Train.heartbeat_timeout=2",
                     "Train.peer_timeout=20")


def test_a_machine_later_than_the_lease_ttl_still_meets_the_first(store):
    met, errors = {}, []

    def arrive(me: int) -> None:
        try:
            p = planned(me)
            met[me] = meet(store, p, Hello.of(p), generation=1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    first = threading.Thread(target=arrive, args=(0,))
    first.start()
    time.sleep(5)  # two and a half lease TTLs: without renewal the first machine's key is gone by now
    arrive(1)
    first.join(30)
    assert not errors, errors
    assert {k: m.plan.nodes for k, m in met.items()} == {0: LISTED, 1: LISTED}
    assert [met[k].plan.node_rank for k in (0, 1)] == [0, 1]
    for m in met.values():  # closing a view ends its watch now, not at the stream's next idle timeout
        m.view.close()
        m.view._thread.join(3)
        assert not m.view._thread.is_alive()
        m.lease.close()


def verdict(peers, timeout_s: float = 10.0) -> Optional[str]:
    """peers.check() once it gives a verdict, or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while peers.check() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return peers.check()


def test_a_fixed_list_restarts_only_with_the_machine_it_lost(store):
    """Train.dist_ips without MIN:MAX is a fixed world: after node 1's loss node 0 waits for it and names it,
    where a pool would re-form without it (the chaos run on etcd once finished on two of three machines)."""
    plans = [dataclasses.replace(planned(me), etcd=store.endpoints, peer_timeout=4) for me in (0, 1)]
    jobs = [EtcdJob(p, None).__enter__() for p in plans]
    peers = meet_jobs(jobs, plans)
    assert not any(isinstance(p, Exception) for p in peers.values()), peers
    first = peers[0].start()
    peers[1].close()  # node 1's supervisor ends: its lease is revoked, its key goes
    verdict(first)
    assert first.lost == ("10.0.0.2",), first.verdict
    jobs[0].note_end(first)
    first.close()
    plan, _ = jobs[0].next_plan(plans[0])
    with pytest.raises(UserError, match=r"node 1 \(10\.0\.0\.2\) did not join"):
        jobs[0].meet(plan, None)


def meet_all(store, plans: list) -> dict:
    """Each plan's machine meets (EtcdJob.meet, in threads): {node: its EtcdPeers, or the exception it raised}."""
    return meet_jobs([EtcdJob(p, None).__enter__() for p in plans], plans)


def meet_jobs(jobs: list, plans: list) -> dict:
    """meet_all with the machines' EtcdJobs already entered."""
    got: dict = {}

    def one(k: int) -> None:
        try:
            got[k] = jobs[k].meet(plans[k], None)
        except Exception as e:  # noqa: BLE001 - returned to the test
            got[k] = e

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return got


def test_node_0s_launcher_port_in_use_stops_every_machine_naming_it(store):
    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    store_port = holder.getsockname()[1]  # Train.port + 1: paddle's TCP store on node 0
    plans = [dataclasses.replace(planned(me), etcd=store.endpoints, port=store_port - 1) for me in (0, 1)]
    try:
        got = meet_all(store, plans)
    finally:
        holder.close()
    for k in (0, 1):
        assert isinstance(got[k], UserError), got[k]
        assert str(got[k]).startswith(f"port {store_port} (Train.port + 1) on node 0 (10.0.0.1) is in use, held "
                                      f"by pid {os.getpid()} "), got[k]


def test_a_machine_whose_ranks_failed_is_named_stopped_by_the_others(store):
    plans = [dataclasses.replace(planned(me), etcd=store.endpoints) for me in (0, 1)]
    peers = meet_all(store, plans)
    try:
        for p in peers.values():
            p.start()
        peers[1].tell("rank 1 failed with exit code -9")
        assert verdict(peers[0]) == "node 1 (10.0.0.2) stopped: rank 1 failed with exit code -9"
        assert peers[0].lost == ()
        assert peers[1].check() is None  # its own cause is no verdict to it
    finally:
        for p in peers.values():
            p.close()


def entered(plans: list, first: Optional[int] = None) -> list:
    """Each machine's EtcdJob entered (its member of the job's own etcd started, etcd reached), in threads;
    machine `first` 5 s before the others."""
    jobs: list = [None] * len(plans)
    errors: list = []

    def one(k: int) -> None:
        try:
            jobs[k] = EtcdJob(plans[k], None).__enter__()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(plans))]
    if first is not None:
        threads[first].start()
        time.sleep(5)  # its member is up (the old code: on the stale data) when the others bootstrap
    for t in threads:
        if t.ident is None:
            t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return jobs


def test_the_jobs_etcd_forms_again_after_a_run_whose_member_was_killed(tmp_path, monkeypatch):
    """Members on 127.0.0.1-3: two end cleanly, the third is killed (its data stays, as under SIGKILL). The
    next run on the same machines and job id forms a new etcd: the stale member does not start on its data
    (the others' bootstrap failed with "member ... has already been bootstrapped")."""
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path))
    listed, port = ("127.0.0.1", "127.0.0.2", "127.0.0.3"), free_port()
    plans = [dataclasses.replace(etcd_plan(("10.0.0.1", "10.0.0.2", "10.0.0.3"), me, f"Train.port={port}",
                                           "Train.job_id=again", "Train.peer_timeout=30"), nodes=listed)
             for me in range(3)]  # a list of loopback addresses is refused as config: placed on them here
    first = entered(plans)
    put(first[0].store, "/paddledist/again/stale", {"from": "the first run"})
    first[2].server.proc.kill()
    first[2].server.proc.wait()
    for job in first[:2]:
        job.__exit__()
    assert (tmp_path / "etcd" / "again" / "127.0.0.3").is_dir()  # the killed member's data
    again = entered(plans, first=2)
    try:
        assert read_prefix(again[1].store, "/paddledist/again/stale")[1] == {}  # a new cluster: the key is gone
    finally:
        for job in again:
            job.__exit__()


def test_with_two_machines_the_only_member_stays_until_the_other_machine_left(tmp_path, monkeypatch):
    """Two machines, one member (node 0's). Node 0 leaving (refused at the meeting, failed, done) keeps its
    member up while node 1 still holds its key in the generation, so that node 1 reads the plan or verdict
    and leaves with the same line (it waited out Train.peer_timeout for an etcd gone with node 0)."""
    monkeypatch.setenv("PADDLEDIST_HOME", str(tmp_path))
    port = free_port()
    plans = [dataclasses.replace(etcd_plan(("10.0.0.1", "10.0.0.2"), me, f"Train.port={port}",
                                           "Train.job_id=linger", "Train.peer_timeout=30",
                                           "Train.heartbeat_timeout=20"), nodes=("127.0.0.1", "127.0.0.2"))
             for me in (0, 1)]
    jobs = entered(plans)
    peers = meet_jobs(jobs, plans)
    assert not any(isinstance(p, Exception) for p in peers.values()), peers
    peers[0].close()
    leaving = threading.Thread(target=jobs[0].__exit__)
    leaving.start()
    leaving.join(2)
    assert leaving.is_alive() and jobs[0].server.proc.poll() is None  # node 1 is still in the generation
    peers[1].close()
    start = time.monotonic()
    leaving.join(10)
    assert not leaving.is_alive() and time.monotonic() - start < 3
    jobs[1].__exit__()


def test_with_one_member_its_machine_is_named_lost_when_it_stops_answering(tmp_path):
    """Two machines run one member, on the first: killing it leaves node 1 unable to renew its lease, and node 1
    names node 0's machine, where the job's etcd was, rather than itself."""
    member, endpoint = loopback_member(str(tmp_path))
    store = Store((endpoint,))
    nodes = ("127.0.0.1", "10.0.0.2")
    plans = [dataclasses.replace(planned(me), nodes=nodes, names=nodes) for me in (0, 1)]
    met: dict = {}
    threads = [threading.Thread(target=lambda k=k: met.update({k: meet(store, plans[k], Hello.of(plans[k]), 1)}))
               for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    second = EtcdPeers(store, met[1]).start()
    member.kill()
    member.wait()
    try:
        assert verdict(second, 15).startswith("node 0 (127.0.0.1) lost: the job's etcd there did not answer for "
                                              "over Train.heartbeat_timeout=2s"), second.verdict
        assert second.lost == ("127.0.0.1",)
    finally:
        second.close()

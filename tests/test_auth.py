"""cluster/auth.py and the hub's door: who may join a job on Train.port. Real sockets on loopback addresses
(127.0.0.0/8 all answer on lo, so 127.0.0.x stand in for machines), the real preflight and heartbeats; the
stranger is paddledist.testing.stranger, the same program the namespace tests run on another host."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import threading
import time

import pytest
from helpers.common import free_port

from paddledist.cluster import ClusterPlan, door, preflight
from paddledist.cluster.auth import SECRET_ENV, Seal, admit, greeting, introduce, job_secret, source_problem
from paddledist.cluster.hello import Hello
from paddledist.cluster.wire import LineSocket, connect_from, encode
from paddledist.config import DeviceSpec
from paddledist.errors import UserError
from paddledist.launch.builder import launcher_env
from paddledist.testing import stranger

pytestmark = pytest.mark.unit

SECRET = b"0123456789abcdef0123456789abcdef"
NODES = ("127.0.0.1", "127.0.0.2")


def node(rank: int, port: int, secret=None, timeout: int = 15) -> ClusterPlan:
    return ClusterPlan(nodes=NODES, node_rank=rank, ifname="lo", device=DeviceSpec("cpu", (0,)), port=port,
                       job_id="t", peer_timeout=timeout, source="test", secret=secret)


def start(plan: ClusterPlan, results: dict, key) -> threading.Thread:
    def one() -> None:
        try:
            results[key] = preflight(plan)
        except UserError as e:
            results[key] = str(e)
    thread = threading.Thread(target=one)
    thread.start()
    return thread


def try_as_stranger(port: int, attack: str, source: str = "127.0.0.2", claim: int = 1) -> dict:
    args = argparse.Namespace(hub=f"127.0.0.1:{port}", nodes=",".join(NODES), claim=claim, job_id="t",
                              attack=attack, secret=SECRET.decode(), source=source)
    return stranger.attempt(args)


def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def hub_listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


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


# --- sealing ---------------------------------------------------------------------------------------------

def sealed_pair(secret: bytes = SECRET) -> tuple[Seal, Seal]:
    return Seal(secret, "h" * 32, "n" * 32, is_hub=True), Seal(secret, "h" * 32, "n" * 32, is_hub=False)


def test_a_sealed_message_opens_once_in_order_and_never_reflected():
    hub, node_ = sealed_pair()
    first, second = node_.wrap({"beat": 1}), node_.wrap({"done": 1})
    assert hub.unwrap(first) == {"beat": 1}
    assert hub.unwrap(first) is None  # a replay within the connection
    assert hub.unwrap(second) == {"done": 1}
    hub2, node2 = sealed_pair()
    assert hub2.unwrap(node2.wrap({"a": 1})) and hub2.unwrap(node2.wrap({"b": 2}) | {"s": 9}) is None  # a gap
    reflected = hub.wrap({"stop": "x"})
    assert hub.unwrap(reflected) is None  # the hub's own message sent back to it


def test_a_tampered_or_foreign_message_fails():
    hub, node_ = sealed_pair()
    envelope = node_.wrap({"beat": 1})
    assert hub.unwrap({**envelope, "b": '{"stop": "forged"}'}) is None
    other_hub, _ = sealed_pair(b"another-secret-0123456789abcdef")
    assert other_hub.unwrap(node_.wrap({"beat": 1})) is None


def test_a_plain_refusal_passes_but_carries_no_authority():
    hub, _ = sealed_pair()
    assert hub.unwrap({"ok": False, "error": "rejected"}) == {"ok": False, "error": "rejected"}
    assert hub.unwrap({"ok": True}) is None


def test_the_hello_is_bound_to_the_hubs_nonce():
    nonce, greet = greeting(SECRET)
    first, _ = introduce(greet, {"node": 1}, SECRET, "hub")
    assert admit(first, nonce, SECRET)[0] == {"node": 1}
    assert admit(first, greeting(SECRET)[0], SECRET)[2].startswith("wrong job secret")  # replayed elsewhere
    assert admit(first, nonce, b"x" * 32)[2].startswith("wrong job secret")
    assert admit({"node": 1}, nonce, SECRET)[2] == "no job secret"
    assert admit(first, nonce, None)[2] == "it has a job secret and this job has none"


def test_a_node_without_the_hubs_secret_says_so_before_sending_anything():
    _, greet = greeting(SECRET)
    with pytest.raises(UserError, match="requires the job secret: set PADDLEDIST_JOB_SECRET"):
        introduce(greet, {"node": 1}, None, "node 0 (h:1)")
    with pytest.raises(UserError, match="this machine has a job secret but node 0"):
        introduce(greeting(None)[1], {"node": 1}, SECRET, "node 0 (h:1)")
    with pytest.raises(UserError, match="did not greet as a paddledist hub"):
        introduce({"something": "else"}, {"node": 1}, None, "node 0 (h:1)")


def test_a_forged_line_on_a_sealed_connection_breaks_it():
    a, b = socket.socketpair()
    hub, node_ = sealed_pair()
    receiving, sending = LineSocket(a), LineSocket(b)
    receiving.seal, sending.seal = hub, node_
    sending.send({"beat": 1})
    b.sendall(b'{"stop": "forged", "node": 1}\n')
    a.setblocking(False)
    until(lambda: b"forged" in a.recv(65536, socket.MSG_PEEK))
    messages, closed = receiving.receive_ready()
    assert messages == [{"beat": 1}] and closed and "failed the job secret's check" in receiving.broken
    a.close()
    b.close()


# --- where a connection comes from -----------------------------------------------------------------------

def test_a_claim_must_come_from_the_listed_address_or_its_names():
    assert source_problem(1, "10.0.0.2", "10.0.0.2", "10.0.0.2") is None
    assert source_problem(1, "10.0.0.2", "10.0.0.2", "::ffff:10.0.0.2") is None
    assert "comes from another address" in source_problem(1, "10.0.0.2", "10.0.0.2", "10.0.0.3")
    assert source_problem(1, "10.0.0.9", "localhost", "127.0.0.1") is None  # a name: any address it resolves to
    assert "not a joining node" in source_problem(7, None, None, "10.0.0.2")


# --- the hub's door, with real connections -----------------------------------------------------------------

def test_an_impostor_from_another_address_is_refused_and_the_real_node_joins(capfd):
    port = free_port()
    results: dict = {}
    hub = start(node(0, port), results, 0)
    until(lambda: hub_listening(port))
    answer = try_as_stranger(port, "plain", source="127.0.0.3")
    assert answer == {"ok": False, "error": "rejected this connection: it claims to be node 1 (127.0.0.2) but "
                                             "comes from another address"}
    start(node(1, port), results, 1).join(30)
    hub.join(30)
    assert all(not isinstance(results[k], str) for k in (0, 1)), results
    for peers in results.values():
        peers.close()
    err = capfd.readouterr().err
    assert ("paddledist: node 0 rejected a connection from 127.0.0.3: it claims to be node 1 (127.0.0.2) but comes "
            "from another address") in err


@pytest.mark.parametrize("attack, why", [
    ("plain", "no job secret"),
    ("stop", "no job secret"),
    ("wrong", "wrong job secret (or a hello recorded from another connection)"),
    ("replay", "wrong job secret (or a hello recorded from another connection)"),
])
def test_with_a_secret_a_stranger_at_the_right_address_cannot_join_or_stop(capfd, attack, why):
    port = free_port()
    results: dict = {}
    hub = start(node(0, port, SECRET), results, 0)
    until(lambda: hub_listening(port))
    answer = try_as_stranger(port, attack)
    assert answer == {"ok": False, "error": f"rejected this connection: {why}"}
    start(node(1, port, SECRET), results, 1).join(30)
    hub.join(30)
    assert all(not isinstance(results[k], str) for k in (0, 1)), results
    hub_peers, node_peers = results[0], results[1]
    assert hub_peers.links[1].seal is not None and node_peers.links[0].seal is not None
    hub_peers.start(), node_peers.start()
    node_peers.tell("rank 1 failed with exit code 1")  # a sealed message crosses and is believed
    until(lambda: hub_peers.check() is not None)
    assert hub_peers.check() == "node 1 (127.0.0.2) stopped: rank 1 failed with exit code 1"
    hub_peers.close(), node_peers.close()
    assert f"paddledist: node 0 rejected a connection from 127.0.0.2: {why}" in capfd.readouterr().err


def test_a_secret_on_one_side_only_is_named_on_the_joining_node():
    port = free_port()
    results: dict = {}
    hub = start(node(0, port, SECRET, timeout=3), results, 0)
    until(lambda: hub_listening(port))
    start(node(1, port, None, timeout=3), results, 1).join(30)
    hub.join(30)
    assert "requires the job secret" in results[1], results
    assert "did not join" in results[0], results


def test_the_job_secret_variable_reaches_the_plan_of_a_dry_run(tmp_path):
    from paddledist.launch import stage
    from paddledist.config import load
    cfg = load(None, [f"Train.job_secret_file={tmp_path / 'missing'}"])
    with pytest.raises(UserError, match="Train.job_secret_file .* cannot be read"):
        stage.launch_stage(cfg, os.path.abspath(__file__), [], dry_run=True)
    plan = dataclasses.replace(node(0, 1), secret=SECRET)
    assert "0123456789abcdef" not in repr(plan)


def test_a_hello_of_another_shape_is_refused_at_the_door():
    assert Hello.from_wire(Hello.of(node(1, 6170)).to_wire()) == Hello.of(node(1, 6170))
    wire = Hello.of(node(1, 6170)).to_wire()
    for broken in ({**wire, "node": "1"}, {**wire, "node": True}, {**wire, "nodes": "a,b"}, {**wire, "nodes": [1]},
                   {k: v for k, v in wire.items() if k != "facts"}, {**wire, "rank": 1.5}):
        assert Hello.from_wire(broken) is None, broken


def test_a_hello_that_arrived_while_node_0_was_busy_is_read_not_dropped(monkeypatch):
    """At thousands of machines node 0 reaches a connection after its HELLO_S: what has arrived counts."""
    monkeypatch.setattr(door, "HELLO_S", 0.3)
    with door.Door(node(0, free_port())) as hub:
        link = LineSocket(connect_from("127.0.0.2", ("127.0.0.1", hub.plan.port), 5.0))
        hub._first_line(time.monotonic() + 0.2)  # accepts and greets; the hello is not there yet
        first, _ = introduce(link.read(5.0), Hello.of(node(1, hub.plan.port)).to_wire(), None, "hub")
        link.send(first)
        time.sleep(0.6)  # node 0 busy elsewhere, past HELLO_S, the hello waiting in the kernel
        got = hub.next(time.monotonic() + 2.0)
        assert got is not None and got[1].node == 1
        silent = socket.create_connection(("127.0.0.1", hub.plan.port))  # says nothing at all: dropped
        assert hub.next(time.monotonic() + 1.5) is None and not hub.pending
        silent.close(), link.close(), got[0].close()


def test_a_joining_node_dials_again_when_node_0_closes_its_connection_unanswered():
    port = free_port()
    results: dict = {}
    early = socket.create_server(("127.0.0.1", port))  # a node 0 that greets, then drops the connection
    joiner = start(node(1, port), results, 1)
    conn, _ = early.accept()
    conn.sendall(encode(greeting(None)[1]))
    conn.recv(1 << 20)
    conn.close(), early.close()
    hub = start(node(0, port), results, 0)
    joiner.join(30), hub.join(30)
    assert all(not isinstance(results[k], str) for k in (0, 1)), results
    for peers in results.values():
        peers.close()

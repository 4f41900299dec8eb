"""cluster/messages.py: every heartbeat message crosses the wire as the same value; anything else is not one."""

from __future__ import annotations

import json

import pytest

from paddledist.cluster import messages as msg

pytestmark = pytest.mark.unit

EVERY = [msg.Beat(2), msg.Done(3), msg.AllDone(), msg.Stop("rank 1 failed with exit code 1", 1),
         msg.Preempt("SIGTERM", 4), msg.Lost(5, "its connection closed")]


@pytest.mark.parametrize("message", EVERY, ids=lambda m: type(m).__name__)
def test_every_message_crosses_the_wire_unchanged(message):
    assert msg.decode(json.loads(json.dumps(msg.encode(message))), sender=9) == message


def test_a_relayed_message_without_a_node_is_about_the_link_it_came_on():
    assert msg.decode({"stop": "x"}, sender=7) == msg.Stop("x", 7)
    assert msg.decode({"preempt": "SIGUSR1", "node": "1"}, sender=7) == msg.Preempt("SIGUSR1", 7)


@pytest.mark.parametrize("data", [{}, {"hello": 1}, {"all_done": "yes"}, {"stop": 3}, {"lost": "2"},
                                  {"lost": True}, {"preempt": None}])
def test_anything_else_is_not_a_message(data):
    assert msg.decode(data, sender=1) is None


def test_only_a_live_node_closing_is_news():
    assert [s for s in msg.NodeState if not s.finished] == [msg.NodeState.LIVE, msg.NodeState.LOST]

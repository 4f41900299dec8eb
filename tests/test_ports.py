"""Test ports come from below the kernel's ephemeral range, with the ports after them free too: a port the
kernel hands out (bind to 0) can become an outgoing connection's source port before a job binds it or
Train.port + 1 (a flaky heartbeat test came from that)."""

from __future__ import annotations

import socket

import pytest

from paddledist.testing.ports import LOW, ephemeral_low, free_ports

pytestmark = pytest.mark.unit


def test_a_block_of_free_ports_below_the_ephemeral_range(tmp_path):
    port = free_ports(4)
    assert LOW <= port and port + 4 <= ephemeral_low()
    held = []
    for p in range(port, port + 4):  # every port of the block can be bound now
        s = socket.socket()
        s.bind(("", p))
        held.append(s)
    for s in held:
        s.close()


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path):
    (tmp_path / "range").write_text("40000\t60999\n")
    assert ephemeral_low(str(tmp_path / "range")) == 40000
    assert ephemeral_low(str(tmp_path / "missing")) == 32768

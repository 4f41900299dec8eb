"""Free TCP ports for tests and benchmarks that start real jobs on this machine."""

from __future__ import annotations

import random
import socket

LOW = 20000
"""Ports are picked from LOW up to the kernel's ephemeral range: a port the kernel handed out (bind to 0) may be
handed out again as the source port of any outgoing connection, and a job needs Train.port and the ones after
it (its store and its ranks' endpoints) to stay free until it binds them."""


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(count: int = 4) -> int:
    """The first of `count` consecutive ports that nothing holds now, below the ephemeral range."""
    high = max(LOW + count + 1, ephemeral_low() - count)
    for _ in range(500):
        port = random.randrange(LOW, high)
        if all(_bindable(p) for p in range(port, port + count)):
            return port
    raise RuntimeError(f"no {count} consecutive free ports in {LOW}..{high} on this machine")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True

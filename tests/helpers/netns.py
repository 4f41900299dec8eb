"""Network-namespace hosts for tests: the code lives in paddledist/testing/netns.py (benchmarks use it too);
this module re-exports it and adds the `netns_hosts` fixture, which skips where namespaces are unavailable."""

from __future__ import annotations

import pytest

from helpers.common import unavailable
from paddledist.testing.netns import NetnsHosts, NetnsUnavailable, _kill_group, _kill_namespace_processes  # noqa: F401


@pytest.fixture
def netns_hosts():
    """`netns_hosts(n) -> NetnsHosts`: n namespace hosts, removed after the test; skips where unavailable."""
    made: list[NetnsHosts] = []

    def make(count: int) -> NetnsHosts:
        try:
            hosts = NetnsHosts(count).__enter__()
        except NetnsUnavailable as e:
            unavailable(str(e))
        made.append(hosts)
        return hosts

    yield make
    for hosts in made:
        hosts.close()

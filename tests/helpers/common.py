"""Small helpers every kind of test uses: a skip that CI turns into a failure, and free ports."""

from __future__ import annotations

import os

import pytest

from paddledist.testing.ports import free_ports


def unavailable(reason: str) -> None:
    """Skip a test whose real component (root, namespaces, a mount, Slurm, the PaddleClas or PaddleX reference)
    cannot be had here; in CI (CI=true, root, the package registries) fail instead: a skip there would hide that
    a check never ran."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI must run this test, not skip it)")
    pytest.skip(reason)


HOLDER_MARK = "paddledist_port_holder"
"""Appears in the command line of the process `busy_port` starts, so tests can check it is the one named."""


def free_port() -> int:
    """A TCP port that is free now, with the three after it, below the kernel's ephemeral range (a port the
    kernel picks there can become some connection's source port before the job binds it, or Train.port + 1)."""
    return free_ports(4)

"""The control plane at scale: the open-file limit a hub needs (raised at start, one line when the hard limit is
too low), and 256 simulated node supervisors (paddledist.testing.controlplane: the real preflight, heartbeats,
loss relay and all-done over loopback addresses) joining, naming one killed node everywhere, and finishing."""

from __future__ import annotations

import resource

import pytest

from paddledist.cluster import fdlimit
from paddledist.errors import UserError


@pytest.fixture
def low_soft_limit():
    """The soft open-file limit lowered to 512 for the test (the hard limit untouched), restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.unit
def test_the_soft_open_file_limit_is_raised_to_what_the_hub_needs(low_soft_limit):
    if low_soft_limit != resource.RLIM_INFINITY and low_soft_limit < fdlimit.needed_by(1024, 0):
        pytest.skip(f"the hard limit here ({low_soft_limit}) is below what 1024 machines need")
    fdlimit.ensure_open_files(fdlimit.needed_by(1024, 0), "node 0")
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 1024 + fdlimit.SPARE


@pytest.mark.unit
def test_a_hard_limit_too_low_is_one_line_naming_the_fix(low_soft_limit):
    if low_soft_limit == resource.RLIM_INFINITY:
        pytest.skip("no hard limit here")
    with pytest.raises(UserError) as e:
        fdlimit.ensure_open_files(low_soft_limit + 1, "node 0 (127.0.0.1) of 70000 machines")
    message = str(e.value)
    assert "\n" not in message and f"needs {low_soft_limit + 1} open files" in message
    assert f"hard limit here is {low_soft_limit}" in message and "ulimit -Hn" in message
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 512


@pytest.mark.unit
def test_a_joining_node_needs_few_descriptors_and_node_0_one_per_machine():
    assert fdlimit.needed_by(4096, 3) == fdlimit.SPARE + 1
    assert fdlimit.needed_by(4096, 0) == fdlimit.SPARE + 4096

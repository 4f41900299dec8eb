"""The control plane at scale: the open-file limit a hub needs (raised at start, one line when the hard limit is
too low), and 256 simulated node supervisors (paddledist.testing.controlplane: the real preflight, heartbeats,
loss relay and all-done over loopback addresses) joining, naming one killed node everywhere, and finishing."""

from __future__ import annotations

import resource

import pytest

from paddledist.cluster import fdlimit, preflight
from paddledist.errors import UserError
from paddledist.testing import controlplane
from paddledist.testing.ports import free_ports


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


@pytest.mark.unit
def test_node_0_refuses_a_job_beyond_its_hard_open_file_limit_in_one_line():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > 60000:
        pytest.skip(f"hard limit {hard}: a job beyond it needs more loopback addresses than the simulator makes")
    nodes = tuple(controlplane.address(i) for i in range(hard))
    with pytest.raises(UserError) as e:
        preflight(controlplane.sim_plan(nodes, 0, free_ports(2), 5.0, 60.0))
    assert f"node 0 (127.0.0.1) of {hard} machines needs {hard + fdlimit.SPARE} open files" in str(e.value)


@pytest.mark.multiproc
def test_256_simulated_nodes_join_name_one_loss_everywhere_and_finish():
    """The same simulator as benchmarks/control_plane.py: 256 supervisors' real control planes."""
    with controlplane.Simulation(256) as sim:
        assert sim.join() < 30
        lost = sim.detect(200)
        assert lost["named"] == lost["others"] == 255, lost["unnamed"]
        assert lost["s"] < 5
    with controlplane.Simulation(256) as sim:
        sim.join()
        assert sim.all_done() < 10  # raises when any node's outcome is a failure


@pytest.mark.multiproc
def test_with_a_job_secret_256_nodes_join_sealed_stop_everywhere_and_finish():
    """Every hello challenged and every message sealed (cluster/auth.py): the stop relay and all-done still reach
    every node, which they could not if any sealed message failed its check (the link would be lost)."""
    secret = b"a-simulated-job-secret-0123456789"
    with controlplane.Simulation(256, secret=secret) as sim:
        sim.join()
        stopped = sim.stop(255)
        assert stopped["named"] == stopped["others"] == 255, stopped["unnamed"]
    with controlplane.Simulation(256, secret=secret) as sim:
        sim.join()
        sim.all_done()  # raises when any node's outcome is a failure

"""launch.build is pure: the exact launcher argv and environment for every job shape, and the stage-facing API."""

from __future__ import annotations

import os

import paddle  # noqa: F401  (here, not in a unit test: its first import runs ldd, which/nvcc...)
import pytest

from paddledist.cluster import LocalAddress, plan
from paddledist.config import load
from paddledist.errors import UserError
from paddledist.launch import build, command_line, env_changes, in_worker, is_first_machine, launch_stage, needs_launch

pytestmark = pytest.mark.unit

LOCAL = (LocalAddress("lo", "127.0.0.1"), LocalAddress("eth0", "10.0.0.2"))
SCRIPT, ARGS = "/src/tools/train.py", ["-c", "cfg.yaml", "-o", "Global.mode=train"]
LAUNCH = ["py", "-m", "paddle.distributed.launch"]
TAIL = [SCRIPT, *ARGS]


def shape(*overrides: str, base_env=None):
    cfg = load(None, ["Global.output=out", *overrides])
    p = plan(cfg, local=LOCAL, env={})
    return build(cfg, p, SCRIPT, ARGS, base_env or {}, python="py", package_root="/pkg")


def env_with(**extra: str) -> dict:
    return {"PYTHONPATH": "/pkg", "PYTHONUNBUFFERED": "1", **extra}


def test_one_node_one_process():
    argv, env = shape()
    assert argv == LAUNCH + ["--host", "127.0.0.1", "--nproc_per_node", "1", "--job_id", "paddledist",
                             "--log_dir", "out/logs/127.0.0.1"] + TAIL
    assert env == env_with(GLOO_SOCKET_IFNAME="lo")


def test_one_node_several_cpu_processes():
    argv, env = shape("Global.device=cpu:0,1,2")
    assert argv == LAUNCH + ["--host", "127.0.0.1", "--nproc_per_node", "3", "--job_id", "paddledist",
                             "--log_dir", "out/logs/127.0.0.1"] + TAIL
    assert env == env_with(GLOO_SOCKET_IFNAME="lo")


def test_one_node_several_gpu_processes():
    argv, env = shape("Global.device=gpu:0,1")
    assert argv == LAUNCH + ["--host", "127.0.0.1", "--devices", "0,1", "--job_id", "paddledist",
                             "--log_dir", "out/logs/127.0.0.1"] + TAIL
    assert env == env_with(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")


def test_several_nodes_one_device_each_still_get_ips():
    """PaddleX drops --ips when a node has one device; every node would then think it is alone."""
    argv, env = shape("Train.dist_ips=10.0.0.1,10.0.0.2,10.0.0.3", "Train.job_id=j1")
    assert argv == LAUNCH + ["--ips", "10.0.0.1,10.0.0.2,10.0.0.3", "--start_port", "6171", "--host", "10.0.0.2",
                             "--nproc_per_node", "1", "--job_id", "j1", "--log_dir", "out/logs/10.0.0.2"] + TAIL
    assert env == env_with(GLOO_SOCKET_IFNAME="eth0")


def test_several_nodes_several_gpus():
    argv, env = shape("Train.dist_ips=10.0.0.2,10.0.0.7", "Global.device=gpu:0,1,2,3", "Train.port=7000")
    assert argv == LAUNCH + ["--ips", "10.0.0.2,10.0.0.7", "--start_port", "7001", "--host", "10.0.0.2",
                             "--devices", "0,1,2,3", "--job_id", "paddledist", "--log_dir", "out/logs/10.0.0.2"] + TAIL
    assert env == env_with(GLOO_SOCKET_IFNAME="eth0", NCCL_SOCKET_IFNAME="eth0")


def test_several_nodes_several_cpu_processes():
    argv, _ = shape("Train.dist_ips=10.0.0.2,10.0.0.7", "Global.device=cpu:0,1")
    assert argv[3:9] == ["--ips", "10.0.0.2,10.0.0.7", "--start_port", "6171", "--host", "10.0.0.2"]
    assert argv[9:11] == ["--nproc_per_node", "2"]


def test_env_drops_proxies_and_launcher_overrides_keeps_the_rest():
    base = {"HOME": "/root", "http_proxy": "http://p:3128", "HTTPS_PROXY": "x", "all_proxy": "y", "no_proxy": "z",
            "POD_IP": "10.0.0.9", "PADDLE_MASTER": "1.2.3.4:1", "PADDLE_NNODES": "4", "MASTER_ADDR": "a",
            "MASTER_PORT": "1", "PADDLE_TRAINER_ID": "3", "PADDLE_LOG_LEVEL": "DEBUG"}
    _, env = shape(base_env=base)
    assert env == env_with(HOME="/root", no_proxy="z", PADDLE_LOG_LEVEL="DEBUG", GLOO_SOCKET_IFNAME="lo")


def test_env_keeps_the_users_interface_and_pythonpath():
    base = {"GLOO_SOCKET_IFNAME": "ib0", "PYTHONPATH": "/a:/pkg:/b"}
    _, env = shape("Train.dist_ips=10.0.0.1,10.0.0.2", base_env=base)
    assert env["GLOO_SOCKET_IFNAME"] == "ib0"
    assert env["PYTHONPATH"] == "/pkg:/a:/b"


def test_env_changes_lists_sets_and_unsets_for_dry_run():
    base = {"http_proxy": "p", "HOME": "/root", "PYTHONUNBUFFERED": "1"}
    assert env_changes(base, {"HOME": "/root", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "eth0",
                              "PYTHONPATH": "/my dir"}) == \
        ["GLOO_SOCKET_IFNAME=eth0", "PYTHONPATH='/my dir'", "unset http_proxy"]


def test_command_line_is_one_shell_quoted_line():
    assert command_line(["py", "x.py", "-o", "Global.output=my out"]) == "py x.py -o 'Global.output=my out'"


WORKER = {"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "PADDLE_RANK_IN_NODE": "0"}
"""What paddle's launcher sets for a worker (with more)."""
OPERATOR_POD = {"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINERS": "10.0.0.1,10.0.0.2",
                "POD_IP": "10.0.0.2"}
"""What paddle-operator sets for a pod: a machine that still launches, not a worker."""


def test_in_worker_needs_the_launchers_worker_variables():
    assert in_worker(WORKER)
    assert not in_worker({"PADDLE_TRAINER_ID": "0"})
    assert not in_worker(OPERATOR_POD)
    assert not in_worker({})


@pytest.mark.parametrize("overrides, env, expected", [
    ([], {}, False),
    (["Global.device=gpu:3"], {}, False),
    (["Global.device=cpu:0,1"], {}, True),
    (["Global.device=gpu:0,1"], {}, True),
    (["Train.dist_ips=10.0.0.1"], {}, False),
    (["Train.dist_ips=10.0.0.1,10.0.0.2"], {}, True),  # one device per node still means several processes
    (["Train.dist_ips=10.0.0.1,10.0.0.2"], WORKER, False),
    (["Global.device=gpu:0,1"], WORKER, False),
    (["Train.dist_master=10.0.0.1:36543", "Train.nnodes=2"], {}, True),
    (["Train.dist_master=10.0.0.1:36543", "Train.nnodes=1"], {}, False),
    ([], {"PADDLE_MASTER": "job-worker-0:36543", "PADDLE_NNODES": "2"}, True),  # Kubeflow
    ([], OPERATOR_POD, True),  # paddle-operator
    ([], {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2", "SLURM_NODEID": "1"}, True),
    ([], {"SLURM_JOB_NODELIST": "node01", "SLURM_NNODES": "1", "SLURM_NODEID": "0"}, False),
    ([], {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2"}, False),  # a shell in salloc, not srun
])
def test_needs_launch(overrides, env, expected):
    assert needs_launch(load(None, overrides), env) is expected


def test_dry_run_prints_node_command_and_env_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("https_proxy", "http://proxy:3128")
    out = tmp_path / "out"
    cfg = load(None, [f"Global.output={out}", "Train.dist_ips=10.0.0.1,10.0.0.2", "Train.node_ip=10.0.0.2"])
    script = os.path.abspath(__file__)
    assert launch_stage(cfg, script, ["-o", "Global.mode=train"], dry_run=True).code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("paddledist: this node = node 1 of 2 (10.0.0.2 interface unknown, Train.node_ip; "
                               "rank 1 of world size 2)")
    assert lines[1].endswith(f"-m paddle.distributed.launch --ips 10.0.0.1,10.0.0.2 --start_port 6171 --host 10.0.0.2 "
                             f"--nproc_per_node 1 --job_id paddledist --log_dir {out}/logs/10.0.0.2 {script} "
                             "-o Global.mode=train")
    assert "unset https_proxy" in lines
    assert not out.exists()


def test_missing_entry_script_is_a_user_error(tmp_path):
    cfg = load(None, ["Global.device=cpu:0,1"])
    with pytest.raises(UserError, match="does not exist on this machine"):
        launch_stage(cfg, str(tmp_path / "nope.py"), [], dry_run=True)


def test_is_first_machine():
    assert is_first_machine(load(None, []), {})
    with pytest.raises(UserError, match="this machine is not in Train.dist_ips 10.0.0.5"):
        is_first_machine(load(None, ["Train.dist_ips=10.0.0.5"]), {})  # one entry names the machine to use
    assert is_first_machine(load(None, ["Train.dist_ips=10.0.0.5", "Train.node_ip=10.0.0.5"]), {})
    two = ["Train.dist_ips=10.0.0.1,10.0.0.2"]
    assert is_first_machine(load(None, two + ["Train.node_ip=10.0.0.1"]), {})
    assert not is_first_machine(load(None, two + ["Train.node_ip=10.0.0.2"]), {})
    assert not is_first_machine(load(None, two), {"POD_IP": "10.0.0.2"})
    master = load(None, ["Train.dist_master=10.0.0.1:36543", "Train.nnodes=2"])
    assert is_first_machine(master, {"POD_IP": "10.0.0.1"})  # it holds the master's address
    assert not is_first_machine(master, {"POD_IP": "10.0.0.2"})
    kubeflow = {"PADDLE_MASTER": "10.0.0.1:36543", "PADDLE_NNODES": "2"}
    assert is_first_machine(load(None, []), {**kubeflow, "POD_IP": "10.0.0.1"})
    assert not is_first_machine(load(None, []), {**kubeflow, "POD_IP": "10.0.0.2"})
    slurm = {"SLURM_JOB_NODELIST": "10.0.0.[1-2]", "SLURM_NNODES": "2"}
    assert not is_first_machine(load(None, []), {**slurm, "SLURM_NODEID": "1"})


# PaddleX's other card kinds: the launcher picks cards with --devices as for gpu, and the card's collective
# library gets the interface where it has a variable for it. No such card here: argv and env only.
@pytest.mark.unit
@pytest.mark.parametrize("kind, card_var", [("xpu", "BKCL_SOCKET_IFNAME"), ("npu", "HCCL_SOCKET_IFNAME"),
                                            ("dcu", "NCCL_SOCKET_IFNAME"), ("mlu", None)])
def test_other_card_kinds_use_devices_and_their_socket_variable(kind, card_var):
    argv, env = shape("Train.dist_ips=10.0.0.2,10.0.0.7", f"Global.device={kind}:0,1", "Train.port=7000")
    assert argv == LAUNCH + ["--ips", "10.0.0.2,10.0.0.7", "--start_port", "7001", "--host", "10.0.0.2",
                             "--devices", "0,1", "--job_id", "paddledist", "--log_dir", "out/logs/10.0.0.2"] + TAIL
    expected = {"GLOO_SOCKET_IFNAME": "eth0", **({card_var: "eth0"} if card_var else {})}
    assert env == env_with(**expected)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["xpu", "npu", "mlu", "dcu"])
def test_other_card_kinds_need_their_paddle_build(kind):
    from paddledist.stages.common import check_device

    with pytest.raises(UserError, match=f"no {kind.upper()} support"):
        check_device(load(None, [f"Global.device={kind}:0"]))


# --- GPU clusters: the argv as each supported paddle's own launcher reads it ------------------------------

def paddle_launcher_reads(argv: list[str]):
    """The installed paddle's launcher argument parser (paddle.distributed.launch.context.args_envs) on argv."""
    import sys

    from paddle.distributed.launch.context import args_envs

    saved = sys.argv
    sys.argv = ["launch", *argv[3:]]
    try:
        args, unknown = args_envs.parse_args()
    finally:
        sys.argv = saved
    assert unknown == [], unknown
    return args


@pytest.mark.compat
@pytest.mark.parametrize("overrides,expected", [
    (["Train.dist_ips=10.0.0.2,10.0.0.7", "Global.device=gpu:0,1,2,3"],
     {"ips": "10.0.0.2,10.0.0.7", "start_port": 6171, "master": None, "devices": "0,1,2,3", "host": "10.0.0.2"}),
    (["Train.dist_ips=10.0.0.5,10.0.0.2", "Global.device=gpu:4,5", "Train.port=7000"],
     {"ips": "10.0.0.5,10.0.0.2", "start_port": 7001, "devices": "4,5", "host": "10.0.0.2"}),
    (["Train.dist_master=10.0.0.2:7100", "Train.nnodes=2", "Global.device=gpu:0,1,2,3,4,5,6,7"],
     {"master": "10.0.0.2:7100", "nnodes": "2", "rank": 0, "devices": "0,1,2,3,4,5,6,7", "ips": None}),
])
def test_gpu_cluster_argv_is_what_the_installed_paddle_launcher_reads(overrides, expected):
    argv, env = shape(*overrides)
    args = paddle_launcher_reads(argv)
    assert {k: getattr(args, k) for k in expected} == expected
    assert (args.training_script, args.training_script_args) == (SCRIPT, ARGS)
    assert (args.job_id, args.log_dir, args.nproc_per_node) == ("paddledist", "out/logs/10.0.0.2", None)
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"  # the NIC of this node's address


def test_a_gpu_clusters_own_interface_variables_are_kept():
    """A cluster that pins NCCL to its InfiniBand interface keeps it; gloo still gets the plan's NIC."""
    _, env = shape("Train.dist_ips=10.0.0.2,10.0.0.7", "Global.device=gpu:0,1",
                   base_env={"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0"})
    assert env == env_with(NCCL_SOCKET_IFNAME="ib0", NCCL_IB_HCA="mlx5_0", GLOO_SOCKET_IFNAME="eth0")

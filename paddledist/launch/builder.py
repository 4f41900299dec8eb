"""The launch command as a value: build(cfg, plan, ...) -> (argv, env). Pure: no I/O, no clock, no os.environ.

    python -m paddle.distributed.launch [--ips A,B,C --start_port P+1 | --master M:port --nnodes N --rank r]
        --host <this node> (--nproc_per_node N | --devices 0,1) --job_id J --log_dir <output>/logs/<this node>
        script args...

With --ips (and no --master) paddle's launcher assigns node-major ranks from the list order and gives local
rank i the endpoint <node>:P+1+i on every machine; the first endpoint is rank 0's store. With --master (launch
style master) node 0 serves paddle's master on that port and every node passes the rank the preflight agreed,
so the ranks are node-major in the same order. Train.port itself is left for paddledist's preflight.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Mapping, Sequence

from paddledist.cluster import ClusterPlan
from paddledist.config import Config

LAUNCH_MODULE = "paddle.distributed.launch"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The folder holding the paddledist package, put on the workers' PYTHONPATH."""

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
"""Dropped for the workers: a proxy can capture the job's own TCP traffic between machines."""
SECRET_VARS = ("PADDLEDIST_JOB_SECRET",)
"""Dropped for the workers: only the supervisor speaks the authenticated control protocol (cluster/auth.py)."""

LAUNCHER_VARS = (
    # paddle's launcher lets these override its command line (args_envs.env_args_mapping, collective_compatible);
    # platforms set several (Kubeflow: PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID; paddle-operator: POD_IP,
    # PADDLE_TRAINER_*): paddledist has read them already and passes what they mean on the command line.
    "POD_IP", "PADDLE_MASTER", "PADDLE_DEVICES", "PADDLE_NNODES", "PADDLE_NPROC_PER_NODE", "PADDLE_JOB_ID",
    "PADDLE_RANK", "PADDLE_LOG_DIR", "PADDLE_IPS", "PADDLE_START_PORT", "PADDLE_RUN_MODE", "PADDLE_LOG_OVERWRITE",
    "PADDLE_SORT_IP", "PADDLE_MAX_RESTART", "PADDLE_ELASTIC_LEVEL", "PADDLE_ELASTIC_TIMEOUT", "PADDLE_SERVER_NUM",
    "PADDLE_TRAINER_NUM", "PADDLE_SERVERS_ENDPOINTS", "PADDLE_TRAINERS_ENDPOINTS", "PADDLE_GLOO_PORT",
    "PADDLE_WITH_GLOO", "PADDLE_AUTO_PARALLEL_CONFIG", "PADDLE_AUTO_CLUSTER",
    "PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_TRAINERS",
    "DISTRIBUTED_TRAINER_ENDPOINTS", "PADDLE_LAUNCH_WITH_ARGS",
    # paddle 2.x's launcher switched to its legacy launcher on any of these (paddle-operator's elastic mode sets
    # PADDLE_ELASTIC_*); 3.x still reads FLAGS_START_PORT in fleet's legacy launcher and FLAGS_FIXED_PORT for
    # the master form's endpoints. paddledist runs no elastic jobs and picks its own ports: all dropped.
    "PADDLE_ELASTIC_JOB_ID", "PADDLE_ELASTIC_SERVER", "PADDLE_ELASTIC_NP", "FLAGS_START_PORT", "FLAGS_FIXED_PORT",
    # init_parallel_env prefers these over the launcher's PADDLE_MASTER
    "MASTER_ADDR", "MASTER_PORT",
)


def log_dir(cfg: Config, plan: ClusterPlan) -> str:
    """One folder per machine, so machines sharing a file system never write the same workerlog."""
    return os.path.join(cfg.Global.output, "logs", plan.host)


def launcher_argv(cfg: Config, plan: ClusterPlan, script: str, script_args: Sequence[str],
                  python: str = sys.executable) -> list[str]:
    argv = [python, "-m", LAUNCH_MODULE]
    if plan.nnodes > 1 and plan.style == "master":
        argv += ["--master", f"{plan.nodes[0]}:{plan.master_port}", "--nnodes", str(plan.nnodes),
                 "--rank", str(plan.node_rank)]
    elif plan.nnodes > 1:
        argv += ["--ips", ",".join(plan.nodes), "--start_port", str(plan.port + 1)]
    argv += ["--host", plan.host]
    if plan.device.accelerator:
        argv += ["--devices", ",".join(map(str, plan.device.ids))]
    else:  # the CPU build rejects --devices; it only needs a process count
        argv += ["--nproc_per_node", str(plan.nproc_per_node)]
    argv += ["--job_id", plan.job_id, "--log_dir", log_dir(cfg, plan), script, *script_args]
    return argv


def launcher_env(plan: ClusterPlan, base_env: Mapping[str, str], package_root: str = PACKAGE_ROOT) -> dict[str, str]:
    env = {k: v for k, v in base_env.items() if k not in (*PROXY_VARS, *LAUNCHER_VARS, *SECRET_VARS)}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != package_root]
    env["PYTHONPATH"] = os.pathsep.join([package_root, *paths])
    env["PYTHONUNBUFFERED"] = "1"  # the launcher's log lines reach the runner as they happen
    if plan.ifname:
        for name in socket_ifname_vars(plan.device.kind):
            env.setdefault(name, plan.ifname)
    return env


# The card vendor's collective library and the variable that pins its sockets to one interface: NCCL (and
# RCCL on DCU, which reads NCCL's names), Kunlun's BKCL, Ascend's HCCL. Cambricon's CNCL has none we know of.
_CARD_SOCKET_VAR = {"gpu": "NCCL_SOCKET_IFNAME", "dcu": "NCCL_SOCKET_IFNAME", "xpu": "BKCL_SOCKET_IFNAME",
                    "npu": "HCCL_SOCKET_IFNAME"}


def socket_ifname_vars(kind: str) -> tuple[str, ...]:
    """gloo carries CPU collectives, and CPU-side ones on card jobs too; the card's library carries the rest."""
    card = _CARD_SOCKET_VAR.get(kind)
    return ("GLOO_SOCKET_IFNAME", card) if card else ("GLOO_SOCKET_IFNAME",)


def build(cfg: Config, plan: ClusterPlan, script: str, script_args: Sequence[str], base_env: Mapping[str, str],
          python: str = sys.executable, package_root: str = PACKAGE_ROOT) -> tuple[list[str], dict[str, str]]:
    """The launcher's argv and its complete environment (derived from `base_env`)."""
    return launcher_argv(cfg, plan, script, script_args, python), launcher_env(plan, base_env, package_root)


def env_changes(base_env: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """`NAME=value` for what `env` sets or changes, `unset NAME` for what it drops (for --dry-run)."""
    lines = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if base_env.get(k) != v]
    return lines + [f"unset {k}" for k in sorted(base_env) if k not in env]


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)

"""Where a job's machines come from: the config, or what a scheduler put in the environment.

Config first (Train.dist_ips, or Train.dist_master with Train.nnodes); without them, in this order:
- Kubeflow training-operator's PaddleJob: PADDLE_MASTER (worker 0's address:port; worker 0 gets its pod IP,
  the others the name `<job>-worker-0`), PADDLE_NNODES, PADDLE_JOB_ID; no rank. Default port 36543.
- PaddleFlow paddle-operator: POD_IP (the pod IP, or the pod name with intranet: Service), PADDLE_TRAINER_ID
  (the pod's index), and from its ConfigMap PADDLE_TRAINERS (hosts), PADDLE_TRAINER_ENDPOINTS (host:port),
  PADDLE_TRAINERS_NUM.
- Slurm (an srun step, one task per node): SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NODEID.
A platform's variables are ignored, and the start-up log says so, when the config names the machines.
Pure: reads only the mapping it is given; no DNS (plan.py resolves).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Optional

from paddledist.cluster.etcdlink import SCHEME, parse_endpoints
from paddledist.cluster.slurm import slurm_nodes
from paddledist.config import Config, parse_nnodes
from paddledist.errors import UserError

KUBEFLOW_DEFAULT_PORT = 36543
"""training-operator's PaddleJobDefaultPort: PADDLE_MASTER's port when the container names no `master` port."""


@dataclass(frozen=True)
class Source:
    """The job's machines as given, before names are resolved and this machine is placed among them."""

    style: str
    """ips (paddle's --ips list) or master (--master host:port --nnodes N --rank r)."""
    names: tuple[str, ...]
    """Addresses or host names in rank order; empty when the ranks are agreed at the etcd meeting."""
    nnodes: int
    master: Optional[str] = None
    """host:port of paddle's master when given (Train.dist_master, PADDLE_MASTER)."""
    rank: Optional[int] = None
    """This node's rank when the platform says it."""
    rank_var: str = ""
    """The variable that gave `rank` (SLURM_NODEID, PADDLE_TRAINER_ID), for messages."""
    origin: str = "Train.dist_ips"
    """What named the machines, for the log."""
    key: str = "Train.dist_ips"
    """The key or variable that holds the list, for messages."""
    note: str = ""
    """What was ignored, for the log."""
    min_nodes: int = 0
    """Fewest machines the job continues with (Train.nnodes MIN:MAX: master-address mode, or a Train.dist_ips pool);
    0: all `nnodes`."""
    etcd: tuple = ()
    """The endpoints of the user's etcd (Train.dist_master=etcd://...), where the machines meet."""


def find_source(cfg: Config, env: Mapping[str, str]) -> Optional[Source]:
    """The machines of a multi-machine job, or None for one machine."""
    mine = _from_config(cfg)
    # inside a worker paddle's launcher has set PADDLE_MASTER and the rest: they describe this job, not a platform
    platform = None if "PADDLE_RANK_IN_NODE" in env else _from_env(cfg, env)
    if mine and platform:
        return _with_note(mine, f"{platform.origin} in the environment ignored: the config wins")
    return mine or platform


def machine_count(cfg: Config, env: Mapping[str, str]) -> int:
    source = find_source(cfg, env)
    return source.nnodes if source else 1


def _with_note(source: Source, note: str) -> Source:
    return dataclasses.replace(source, note=note)


def _from_config(cfg: Config) -> Optional[Source]:
    train = cfg.Train
    count = parse_nnodes(train.nnodes)
    if train.dist_ips and train.dist_master:
        raise UserError("Train.dist_ips and Train.dist_master are both set; give the machine list (ranks in list "
                        "order, -o Train.launch_style=master for paddle's --master form) or the master address "
                        "with Train.nnodes, not both")
    if train.dist_ips:
        if count is not None and count.most != len(train.dist_ips):
            how = f"{count.least}:{len(train.dist_ips)}" if count.elastic else "drop Train.nnodes"
            raise UserError(f"Train.nnodes={train.nnodes} but Train.dist_ips lists {len(train.dist_ips)} machines; "
                            f"the list is the count (the pool with a range): use {how}")
        if count is not None and count.elastic:
            check_quorum(count.least, len(train.dist_ips))
        return Source(train.launch_style, tuple(train.dist_ips), len(train.dist_ips),
                      min_nodes=count.least if count is not None and count.elastic else 0)
    if train.dist_master:
        if count is None:
            raise UserError("Train.dist_master needs Train.nnodes, the number of machines; "
                            "e.g. -o Train.dist_master=node1:36543 -o Train.nnodes=2")
        if count.most == 1:
            return None  # one machine: nothing to meet
        if train.dist_master.startswith(SCHEME):
            endpoints = parse_endpoints(train.dist_master)
            return Source("ips", (), count.most, master=endpoints[0], origin="Train.dist_master (etcd)",
                          key="Train.dist_master", min_nodes=count.least if count.elastic else 0, etcd=endpoints)
        return Source("master", (), count.most, master=train.dist_master, origin="Train.dist_master",
                      key="Train.dist_master", min_nodes=count.least if count.elastic else 0)
    if count is not None and count.most > 1:
        raise UserError(f"Train.nnodes={train.nnodes} needs Train.dist_master (host:port of the first machine) "
                        "or Train.dist_ips")
    return None


def check_quorum(least: int, listed: int) -> None:
    """Train.nnodes=MIN:MAX with Train.dist_ips (a pool): MIN must be more than half of the list, so that the two
    halves of a cut network can never both go on."""
    if 2 * least <= listed:
        raise UserError(f"Train.nnodes={least}:{listed} with Train.dist_ips of {listed} machines: MIN must be more "
                        f"than half of the list (a quorum, at least {listed // 2 + 1}), so that two halves of a cut "
                        f"network cannot both go on; use -o Train.nnodes={listed // 2 + 1}:{listed}")


def _from_env(cfg: Config, env: Mapping[str, str]) -> Optional[Source]:
    for read in (_kubeflow, _paddle_operator, _slurm):
        source = read(cfg, env)
        if source is not None:
            return source if source.nnodes > 1 else None
    return None


def _count(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "").strip()
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{name}={value!r} in the environment is not a machine count")
    return int(value)


def _kubeflow(cfg: Config, env: Mapping[str, str]) -> Optional[Source]:
    master = env.get("PADDLE_MASTER", "").strip()
    if not master:
        return None
    if "PADDLE_NNODES" not in env:
        raise UserError(f"PADDLE_MASTER={master} is set without PADDLE_NNODES; set the number of machines "
                        "(Kubeflow's PaddleJob sets both) or unset PADDLE_MASTER")
    if ":" not in master:
        master = f"{master}:{KUBEFLOW_DEFAULT_PORT}"
    return Source("master", (), _count(env, "PADDLE_NNODES"), master=master, key="PADDLE_MASTER",
                  origin="PADDLE_MASTER and PADDLE_NNODES (Kubeflow PaddleJob)")


def _paddle_operator(cfg: Config, env: Mapping[str, str]) -> Optional[Source]:
    hosts = env.get("PADDLE_TRAINERS", "").strip()
    key = "PADDLE_TRAINERS"
    if not hosts and env.get("PADDLE_TRAINER_ENDPOINTS", "").strip():
        key = "PADDLE_TRAINER_ENDPOINTS"
        hosts = ",".join(e.strip().rsplit(":", 1)[0] for e in env["PADDLE_TRAINER_ENDPOINTS"].split(","))
    if not hosts or "PADDLE_TRAINER_ID" not in env:
        return None
    names = tuple(h.strip() for h in hosts.split(","))
    if "PADDLE_TRAINERS_NUM" in env and _count(env, "PADDLE_TRAINERS_NUM") != len(names):
        raise UserError(f"PADDLE_TRAINERS_NUM={env['PADDLE_TRAINERS_NUM']} but {key} names {len(names)} machines")
    rank = env["PADDLE_TRAINER_ID"].strip()
    if not rank.isdigit() or int(rank) >= len(names):
        raise UserError(f"PADDLE_TRAINER_ID={rank!r} is not a machine of {key}={hosts}")
    return Source(cfg.Train.launch_style, names, len(names), rank=int(rank), rank_var="PADDLE_TRAINER_ID",
                  key=key, origin=f"{key} and PADDLE_TRAINER_ID (paddle-operator)")


def _slurm(cfg: Config, env: Mapping[str, str]) -> Optional[Source]:
    if env.get("SLURM_NNODES", "").strip() == "1" or "SLURM_NODEID" not in env:
        return None  # one node, or a shell in an allocation rather than an srun step: not a multi-machine job
    found = slurm_nodes(env)
    if found is None:
        return None
    names, node = found
    tasks = env.get("SLURM_NTASKS", "").strip()
    if tasks.isdigit() and int(tasks) != len(names):
        raise UserError(f"SLURM_NTASKS={tasks} on {len(names)} nodes: start one task per node "
                        "(srun --ntasks-per-node=1; paddle's launcher starts the processes of each node)")
    return Source(cfg.Train.launch_style, names, len(names), rank=node, rank_var="SLURM_NODEID",
                  key="SLURM_JOB_NODELIST", origin="SLURM_JOB_NODELIST and SLURM_NODEID (Slurm)")

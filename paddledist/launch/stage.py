"""What the stages call: in_worker, needs_launch, launch_stage."""

from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

from paddledist import cluster
from paddledist.config import Config, parse_device
from paddledist.errors import UserError
from paddledist.launch.builder import build, command_line, env_changes
from paddledist.launch.runner import run


def in_worker(env: Mapping[str, str]) -> bool:
    """True inside a process started by paddle.distributed.launch: such a process trains, it never launches
    again. The launcher sets PADDLE_RANK_IN_NODE with the worker variables; paddle-operator's pods carry
    PADDLE_TRAINER_ID and PADDLE_TRAINERS_NUM too, but they name machines, and those still launch."""
    return all(name in env for name in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_RANK_IN_NODE"))


def needs_launch(cfg: Config, env: Mapping[str, str] = os.environ) -> bool:
    """More than one process in the job (several machines, from the config or a platform's variables, or
    several devices here) and not already a worker. Several machines with one device each still need the
    launcher."""
    if in_worker(env):
        return False
    return cluster.machine_count(cfg, env) > 1 or parse_device(cfg.Global.device).nproc > 1


def is_first_machine(cfg: Config, env: Mapping[str, str] = os.environ) -> bool:
    """True for a one-machine job, else whether this machine is node 0 (where rank 0 and the results live; in
    master-address mode the machine holding the master's address). Raises UserError when this machine is not
    one of the job's machines."""
    if cluster.machine_count(cfg, env) < 2:
        return True
    return cluster.plan(cfg, env=env).node_rank == 0


def launch_stage(cfg: Config, script: str, script_args: Sequence[str], dry_run: bool) -> int:
    """Plan, check, build and (unless dry_run) run the launcher that re-executes `script` in every worker."""
    plan = cluster.plan(cfg)
    if not os.path.isfile(script):
        raise UserError(f"entry script {script} does not exist on this machine; every machine needs the same "
                        "code at the same path")
    argv, env = build(cfg, plan, script, script_args, os.environ)
    print(f"paddledist: {plan.summary()}", flush=True)
    if dry_run:
        _print_command(plan, argv, env)
        return 0
    _print_choices(plan, env)
    peers = cluster.preflight(plan, cluster.fingerprint(cfg) if plan.nnodes > 1 else None)
    if peers is None:
        return run(argv, env, plan)
    try:
        if not plan.agreed:  # master-address mode: the rendezvous has just placed every node
            plan = peers.plan
            argv, env = build(cfg, plan, script, script_args, os.environ)
            if plan.node_rank != 0:
                print(f"paddledist: {plan.summary()}", flush=True)
        return run(argv, env, plan, peers=peers.start())
    finally:
        peers.close()


def _print_command(plan: cluster.ClusterPlan, argv: Sequence[str], env: Mapping[str, str]) -> None:
    print(f"paddledist: command: {command_line(argv)}")
    if not plan.agreed and plan.node_rank != 0:
        print(f"paddledist: --rank {plan.node_rank} is provisional: node 0 ({plan.nodes[0]}) assigns this "
              "node's rank at the rendezvous (by address, or the platform's rank)")
    print("paddledist: environment changes:")
    print("\n".join(env_changes(os.environ, env)), flush=True)


def _print_choices(plan: cluster.ClusterPlan, env: Mapping[str, str]) -> None:
    names = [n for n in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if n in env]
    chosen = ", ".join(f"{n}={env[n]}" for n in names) or "no socket interface set (unknown)"
    where = (f"meeting the other {plan.nnodes - 1} node(s) on {plan.nodes[0]}:{plan.port} "
             f"(up to Train.peer_timeout={plan.peer_timeout}s)" if plan.nnodes > 1 else "one node")
    print(f"paddledist: {chosen}; {where}", file=sys.stdout, flush=True)

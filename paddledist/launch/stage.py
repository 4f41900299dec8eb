"""What the stages call: in_worker, needs_launch, launch_stage."""

from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

from paddledist import cluster
from paddledist.config import Config, parse_device
from paddledist.errors import UserError
from paddledist.launch import stall
from paddledist.launch.builder import build, command_line, env_changes, log_dir
from paddledist.launch.runner import run


def in_worker(env: Mapping[str, str]) -> bool:
    """True inside a process started by paddle.distributed.launch (or a platform setting paddle's worker
    variables): such a process trains, it never launches again."""
    return "PADDLE_TRAINER_ID" in env and "PADDLE_TRAINERS_NUM" in env


def needs_launch(cfg: Config, env: Mapping[str, str] = os.environ) -> bool:
    """More than one process in the job (several machines, or several devices here) and not already a worker.
    Several machines with one device each still need the launcher (with --ips)."""
    machines = len(cfg.Train.dist_ips or ())
    return (machines > 1 or parse_device(cfg.Global.device).nproc > 1) and not in_worker(env)


def is_first_machine(cfg: Config, env: Mapping[str, str] = os.environ) -> bool:
    """True without Train.dist_ips or with one machine, else whether this machine is node 0 (where rank 0 and the
    results live). Raises UserError when this machine is not in the list."""
    if len(cfg.Train.dist_ips or ()) < 2:
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
        print(f"paddledist: command: {command_line(argv)}")
        print("paddledist: environment changes:")
        print("\n".join(env_changes(os.environ, env)), flush=True)
        return 0
    _print_choices(plan, env)
    peers = cluster.preflight(plan, cluster.fingerprint(cfg) if plan.nnodes > 1 else None)
    with stall.watching(cfg.Train.stall_timeout, plan, log_dir(cfg, plan), env, peers) as (env, watchers):
        if peers is None:
            return run(argv, env, plan, watchers)
        try:
            return run(argv, env, plan, watchers, peers=peers.start())
        finally:
            peers.close()


def _print_choices(plan: cluster.ClusterPlan, env: Mapping[str, str]) -> None:
    names = [n for n in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if n in env]
    chosen = ", ".join(f"{n}={env[n]}" for n in names) or "no socket interface set (unknown)"
    where = (f"meeting the other {plan.nnodes - 1} node(s) on {plan.nodes[0]}:{plan.port} "
             f"(up to Train.peer_timeout={plan.peer_timeout}s)" if plan.nnodes > 1 else "one node")
    print(f"paddledist: {chosen}; {where}", file=sys.stdout, flush=True)

"""What the stages call: in_worker, needs_launch, launch_stage."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from paddledist import cluster
from paddledist.cluster import auth, etcdserver
from paddledist.cluster.etcdjob import EtcdJob
from paddledist.config import Config, parse_device
from paddledist.errors import PREEMPTED_EXIT, UserError
from paddledist.launch import stall
from paddledist.launch.builder import build, command_line, env_changes, log_dir
from paddledist.launch.control import Control
from paddledist.launch.runner import Ended, Preemption, run_to_end
from paddledist.runfiles.latest import latest_progress


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


@dataclass(frozen=True)
class Launched:
    """How a stage ended: its exit code, and the plan of its last launch (None: it ran in this process). A pool
    may have re-formed without its first listed machine: the stages after it follow rank 0 there."""
    code: int
    plan: Optional[cluster.ClusterPlan] = None


def is_first_machine(cfg: Config, env: Mapping[str, str] = os.environ,
                     last: Optional[cluster.ClusterPlan] = None) -> bool:
    """True for a one-machine job, else whether this machine is node 0 (where rank 0 and the results live; in
    master-address mode the machine holding the master's address; after `last`, an earlier stage's launch of
    the same pool, its first live machine). UserError when this machine is not one of the job's machines."""
    if cluster.machine_count(cfg, env) < 2 and not cfg.Train.dist_ips:
        return True
    listed = cluster.plan(cfg, env=env)
    if last is not None and last.pool == listed.pool:
        return last.node_rank == 0
    return listed.node_rank == 0


def launch_stage(cfg: Config, script: str, script_args: Sequence[str], dry_run: bool) -> Launched:
    """Plan, check, build and (unless dry_run) run the launcher that re-executes `script` in every worker;
    restarts after failures (Train.max_restarts) and preemption (exit PREEMPTED_EXIT) are handled here."""
    plan = dataclasses.replace(cluster.plan(cfg), secret=auth.job_secret(cfg.Train.job_secret_file))
    if not os.path.isfile(script):
        raise UserError(f"entry script {script} does not exist on this machine; every machine needs the same "
                        "code at the same path")
    argv, env = build(cfg, plan, script, script_args, os.environ)
    print(f"paddledist: {plan.summary()}", flush=True)
    if dry_run:
        _print_command(plan, argv, env)
        return Launched(0, plan)
    _print_choices(plan, env)
    if plan.nnodes > 1 and plan.secret is None and not plan.etcd:
        print(auth.HINT, flush=True)
    if plan.nnodes < 2:
        with Control() as control:
            return _launch_with_restarts(cfg, plan, script, list(script_args), control)
    with EtcdJob(plan, plan.secret) as etcd, Control() as control:
        return _launch_with_restarts(cfg, plan, script, list(script_args), control, etcd)


def _launch_with_restarts(cfg: Config, plan: cluster.ClusterPlan, script: str, script_args: list[str],
                          control: Control, etcd: Optional[EtcdJob] = None) -> Launched:
    """Meet and run; after a failure, up to Train.max_restarts times: meet every node again in etcd and relaunch
    with Train.resume_path=auto (the same set of nodes, or with Train.nnodes MIN:MAX at least MIN of them: a new
    world size continues the schedule by progress; a Train.dist_ips pool re-forms without the machines the loss
    verdict names, cluster/etcdjob.py)."""
    restarts: list[dict] = []
    args = script_args
    while True:
        ended, ran = _launch_once(cfg, plan, script, args, control, restarts, etcd)
        if ended.code == 0 and control.saved():
            print(f"paddledist: preempted: every rank saved {cfg.Global.output}/latest at the same step; "
                  f"exit code {PREEMPTED_EXIT}: run the same command with Train.resume_path=auto to continue",
                  flush=True)
            return Launched(PREEMPTED_EXIT, ran)
        if ended.code == 0 or ended.signalled or control.requested():
            return Launched(ended.code, ran)
        if len(restarts) >= cfg.Train.max_restarts:
            if restarts:
                print(f"paddledist: giving up after {len(restarts)} restart(s) (Train.max_restarts="
                      f"{cfg.Train.max_restarts}): {ended.cause}", file=sys.stderr, flush=True)
            return Launched(ended.code, ran)
        plan = _regroup(cfg, plan, ended, restarts, etcd)
        if plan is None:
            return Launched(ended.code, ran)
        args = [*script_args, "-o", "Train.resume_path=auto"]
        control.reset()


def _regroup(cfg: Config, plan: cluster.ClusterPlan, ended: Ended, restarts: list[dict],
             etcd: Optional[EtcdJob]) -> Optional[cluster.ClusterPlan]:
    """The plan of the next launch (a Train.dist_ips pool: without the lost machine(s), with those that came
    back, agreed in etcd), the restart recorded and announced; None: stop."""
    plan, line = etcd.next_plan(plan) if etcd else (plan, "")
    if plan is None:
        print(f"paddledist: {line}: {ended.cause}", file=sys.stderr, flush=True)
        return None
    if line:
        print(f"paddledist: {line}", flush=True)
    restarts.append({"cause": ended.cause, **(latest_progress(cfg.Global.output) or {"epoch": 0})})
    who = f"at least {plan.min_nodes} of the {plan.nnodes} nodes" if plan.min_nodes else f"all {plan.nnodes} node(s)"
    again = f"once {who} meet again in {etcd.where()} (up to Train.peer_timeout={plan.peer_timeout}s)" if etcd else ""
    print(f"paddledist: restart {len(restarts)}/{cfg.Train.max_restarts} after: {ended.cause}; relaunching "
          f"from {cfg.Global.output}/latest {again}".rstrip(), flush=True)
    return plan


def _launch_once(cfg: Config, plan: cluster.ClusterPlan, script: str, args: list[str], control: Control,
                 restarts: list[dict], etcd: Optional[EtcdJob]) -> tuple[Ended, cluster.ClusterPlan]:
    """One launch to its end, and the plan it ran under (the meeting's)."""
    peers = etcd.meet(plan, cluster.fingerprint(cfg), restarts) if etcd else None
    if restarts and "Train.resume_path=auto" not in args:  # taken into a running pool: go on from its latest
        args = [*args, "-o", "Train.resume_path=auto"]
    if peers is not None:  # the meeting has just placed every node
        plan = peers.plan
        if plan.node_rank != 0:
            print(f"paddledist: {plan.summary()}", flush=True)
    if restarts:  # Train.nnodes MIN:MAX: a relaunch may run on fewer machines than before
        restarts[-1]["nodes"] = plan.nnodes
    argv, env = build(cfg, plan, script, args, os.environ)
    env.update(control.env(restarts, {"host": plan.host, "nic": plan.ifname or "", "device": cfg.Global.device}))
    preemption = Preemption(lambda why: _preempt(control, peers, why, plan), cfg.Train.preempt_grace)
    # each launch its own progress folder for the stall watchdog: a relaunch starts with no stale reports
    with stall.watching(cfg.Train.stall_timeout, plan, log_dir(cfg, plan), env, peers) as (env, watchers):
        if peers is None:
            return run_to_end(argv, env, plan, watchers, preemption=preemption), plan
        try:
            return run_to_end(argv, env, plan, [*watchers, lambda: _follow(control, peers)], peers=peers.start(),
                              preemption=preemption), plan
        finally:
            peers.close()
            etcd.note_end(peers)


def _preempt(control: Control, peers, why: str, plan: cluster.ClusterPlan) -> None:
    """A preemption signal here: ask this node's ranks, and every other node, to save at the next step."""
    print(f"paddledist: preemption ({why} on node {plan.node_rank}, {plan.host}): every rank saves latest at the "
          f"next step, then every node exits {PREEMPTED_EXIT}", flush=True)
    control.request()
    if peers is not None:
        peers.preempt(why)


def _follow(control: Control, peers) -> None:
    """A watcher that never stops the job: a preemption relayed from another node reaches this node's ranks."""
    if peers.preempted and not control.requested():
        print(f"paddledist: preemption asked by {peers.preempted}: every rank saves latest at the next step, then "
              f"exits {PREEMPTED_EXIT}", flush=True)
        control.request()
    return None


def _print_command(plan: cluster.ClusterPlan, argv: Sequence[str], env: Mapping[str, str]) -> None:
    print(f"paddledist: command: {command_line(argv)}")
    if not plan.agreed and plan.node_rank != 0:
        print(f"paddledist: --rank {plan.node_rank} is provisional: the meeting in etcd assigns this "
              "node's rank (the master's machine first, then the platform's rank, else by address)")
    print("paddledist: environment changes:")
    print("\n".join(env_changes(os.environ, env)), flush=True)


def _print_choices(plan: cluster.ClusterPlan, env: Mapping[str, str]) -> None:
    names = [n for n in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if n in env]
    chosen = ", ".join(f"{n}={env[n]}" for n in names) or "no socket interface set (unknown)"
    place = (f"in etcd {','.join(plan.etcd)}" if plan.etcd else
             f"in the job's etcd {','.join(etcdserver.endpoints(plan))}")
    where = (f"meeting the other {plan.nnodes - 1} node(s) {place} "
             f"(up to Train.peer_timeout={plan.peer_timeout}s)" if plan.nnodes > 1 else "one node")
    print(f"paddledist: {chosen}; {where}", file=sys.stdout, flush=True)

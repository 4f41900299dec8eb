"""Stages (what Global.mode names) and the pipeline that runs them in order, the same command on every machine.

check_dataset runs on every machine (each checks its own copy of the data); train, evaluate and doctor (the
cluster check of tools/doctor.py) run distributed (through the launcher when the job has more than one
process); export and predict run on the first machine only. A list stops at the first failing stage with its
exit code.
"""

from __future__ import annotations

import os
import signal
import sys
from importlib import import_module
from typing import TYPE_CHECKING, Callable, Optional

from paddledist.config import Config, to_yaml
from paddledist.errors import UserError

if TYPE_CHECKING:
    from paddledist.cluster import ClusterPlan
    from paddledist.launch import Launched

DISTRIBUTED = ("train", "evaluate", "doctor")
WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "worker.py")
"""What every launched worker runs: the package's own entry, so neither a checkout's tools/ nor the caller's
script (a console script, `python -m`) needs to exist on the machines."""
FIRST_MACHINE_ONLY = ("export", "predict")
PREFLIGHT_MODULE = {"train": "train_checks"}
"""Where a stage's preflight lives when the stage's own module imports paddle: the launching process runs
the checks without it (importing paddle there cost every job ~1.3 s of start-up)."""


def _stage_runner(stage: str) -> Callable:
    """The in-process body of a stage: run(cfg, dist)."""
    return import_module(f"paddledist.stages.{stage}").run


def run_pipeline(cfg: Config, config_path: str, overrides: list[str], dry_run: bool = False) -> int:
    from paddledist import launch

    if launch.in_worker(os.environ):
        return run_in_worker(cfg, dry_run)
    from paddledist.stages.output_check import check_output

    check_output(cfg, cfg.Global.mode)
    from paddledist.config.inert import inert_notice

    notice = inert_notice(cfg)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    last = None  # the last launch's plan: after a pool re-formed, later stages follow rank 0 to its machine
    for stage in cfg.Global.mode:
        done = run_stage(cfg, stage, config_path, overrides, dry_run, last)
        if done.code != 0:
            return done.code
        last = done.plan or last
    return 0


def run_in_worker(cfg: Config, dry_run: bool) -> int:
    """Started by paddle.distributed.launch (or a platform): run the one stage in this process."""
    from paddledist.stages.common import dist_from_env

    if len(cfg.Global.mode) != 1 or cfg.Global.mode[0] not in DISTRIBUTED:
        raise UserError(f"a launched worker runs one of {', '.join(DISTRIBUTED)}, "
                        f"got Global.mode={list(cfg.Global.mode)}")
    if dry_run:
        print(to_yaml(cfg))
        return 0
    from paddledist.runfiles.progress import install_stack_dump
    from paddledist.engine.trainer import Preempted

    install_stack_dump()  # the stall watchdog asks for this rank's stack with a signal
    dist = dist_from_env(os.environ)
    try:
        _stage_runner(cfg.Global.mode[0])(cfg, dist)
    except Preempted as e:  # every rank saved at the same step; the supervisor turns this into PREEMPTED_EXIT
        print(f"paddledist: preempted at {e}; latest holds this step", flush=True)
    except RuntimeError as e:  # what paddle raises when gloo's transport fails; anything else is raised again
        return _collective_broke(e, dist.rank)
    return 0


def _collective_broke(error: RuntimeError, rank: int) -> int:
    """A collective that broke because a peer rank or machine went away is a consequence, not this rank's bug:
    one line (the runner reads gloo's words in it and names the cause from the other machines), the stack only
    in this rank's log file. Any other exception is raised again, with its traceback."""
    import logging

    from paddledist.launch import paddle_texts

    text = str(error).strip().splitlines()
    if not paddle_texts.collective_broke(text):
        raise error
    logging.getLogger("paddledist").debug("the collective that broke:", exc_info=error)
    print(f"paddledist: rank {rank}: a collective with the other ranks broke ({text[-1]}); "
          f"another rank or machine stopped first, the launcher names which", file=sys.stderr, flush=True)
    return 1


def run_stage(cfg: Config, stage: str, config_path: str, overrides: list[str], dry_run: bool,
              last: Optional[ClusterPlan] = None) -> Launched:
    """One stage here or through the launcher; `last`: an earlier stage's launch plan (launch.is_first_machine)."""
    import dataclasses

    from paddledist import launch

    staged = dataclasses.replace(cfg, Global=dataclasses.replace(cfg.Global, mode=(stage,)))
    first = launch.is_first_machine(cfg, last=last)  # refuses a machine that Train.dist_ips does not list
    if stage in FIRST_MACHINE_ONLY and not first:
        print(f"paddledist: {stage} runs on the first machine of Train.dist_ips only; skipped here", flush=True)
        return launch.Launched(0)
    # In a dry run, weights an earlier train stage would write do not exist yet: its own check covers the rest.
    trained_before = "train" in cfg.Global.mode[:cfg.Global.mode.index(stage)]
    if stage in DISTRIBUTED and (dry_run or launch.needs_launch(cfg)) and not (dry_run and trained_before):
        check_before_launch(staged, stage, dry_run)
    if stage in DISTRIBUTED and launch.needs_launch(cfg):
        args = ["-c", os.path.abspath(config_path)] + [a for o in overrides for a in ("-o", o)]
        return launch.launch_stage(staged, WORKER_SCRIPT, args + ["-o", f"Global.mode={stage}"], dry_run)
    if dry_run:
        print(f"paddledist: dry run: {stage} would run in this process (1 process, device {cfg.Global.device})")
        print(to_yaml(staged))
        return launch.Launched(0)
    if stage == "train":
        return launch.Launched(run_preemptible(staged))
    from paddledist.engine.distenv import DistEnv

    _stage_runner(stage)(staged, DistEnv())
    return launch.Launched(0)


PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def run_preemptible(cfg: Config) -> int:
    """Train in this one process, preemptible as a supervised job is: SIGTERM or SIGUSR1 asks the loop (through
    the same control folder a supervisor would make) to save latest at the next update and stop, and the
    command exits PREEMPTED_EXIT. Left to paddle, SIGTERM printed its C++ FatalError block and saved nothing."""
    from paddledist.engine.distenv import DistEnv
    from paddledist.engine.trainer import Preempted
    from paddledist.errors import PREEMPTED_EXIT
    from paddledist.launch.control import CONTROL_VAR, Control

    train = _stage_runner("train")  # imports paddle first: its own signal handlers are replaced below
    with Control() as control:
        previous = {s: signal.signal(s, lambda signum, _: _asked(control, signum)) for s in PREEMPT_SIGNALS}
        os.environ[CONTROL_VAR] = control.folder
        try:
            train(cfg, DistEnv())
        except Preempted as e:
            print(f"paddledist: preempted at {e}; latest holds this step; exit code {PREEMPTED_EXIT}: run the same "
                  f"command with Train.resume_path=auto to continue", flush=True)
            return PREEMPTED_EXIT
        finally:
            os.environ.pop(CONTROL_VAR, None)
            for s, handler in previous.items():
                signal.signal(s, handler)
    return 0


def _asked(control, signum: int) -> None:
    if not control.requested():
        print(f"paddledist: preemption (signal {signum}): saving latest at the next step", flush=True)
        control.request()


def check_before_launch(cfg: Config, stage: str, dry_run: bool = False) -> None:
    """The stage's own preflight (model, data, labels; weight files on the first machine) and the device
    build, run here before any worker starts or anything is written, so a mistake is one line on every
    machine; the workers repeat it. Runs as this machine's first rank would."""
    from paddledist import cluster, paddle_version
    from paddledist.engine.distenv import DistEnv
    from paddledist.stages.common import check_device

    plan = cluster.plan(cfg)
    check_device(cfg)
    if plan.world_size > 1:
        paddle_version.check_for_collectives()
    dist = DistEnv(rank=plan.ranks[0], world_size=plan.world_size, nnodes=plan.nnodes)
    module = import_module(f"paddledist.stages.{PREFLIGHT_MODULE.get(stage, stage)}")
    preflight = getattr(module, "preflight", None)
    if preflight is not None:
        preflight(cfg, dist, dry_run=dry_run)

"""`--emit slurm`: an sbatch script that runs tools/train.py once per node with `srun`.

The script names no machine: each srun task finds the job's nodes and its own place from SLURM_JOB_NODELIST,
SLURM_NNODES and SLURM_NODEID. For preemption and time limits, Slurm signals the batch shell 120 s before the
end (`--signal=B:USR1@120`); the script passes USR1 on to the srun step (srun forwards it to every node's
command: a preemption, so every rank saves `latest` at one agreed step and every node exits 75), then
requeues the job (`--requeue`), and the requeued run resumes from `<Global.output>/latest/latest.pdparams`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Optional

from paddledist.errors import UserError
from paddledist.submit import JobSpec, dense_ids, train_script

WARNING_S = 120
"""Seconds before the time limit (or a preemption's grace end) at which the batch shell gets SIGUSR1."""


@dataclass(frozen=True)
class SlurmOptions:
    python: str
    """Interpreter on the compute nodes (default: the one running submit.py; a shared venv has the same path)."""
    checkout: str
    """Source checkout whose tools/train.py the nodes run (same path on every node)."""
    partition: Optional[str] = None
    """#SBATCH --partition, when given."""
    time: Optional[str] = None
    """#SBATCH --time, when given (e.g. 04:00:00)."""


_SBATCH_VALUE = re.compile(r"^[A-Za-z0-9._:+@,=-]+$")
"""What an #SBATCH value may hold here: a space or newline would end the option or start a shell line."""


def sbatch_value(value: str, where: str) -> str:
    if not _SBATCH_VALUE.match(value):
        raise UserError(f"{where}={value!r} cannot go into an #SBATCH line; use letters, digits and ._:+@,=- only")
    return value


def sbatch_lines(job: JobSpec, opts: SlurmOptions) -> list[str]:
    """The #SBATCH header: one task per node, the cards per node, the warning signal and requeue."""
    per_node = dense_ids(job.device, "Slurm")
    sbatch_value(job.job_id, "Train.job_id")
    lines = [f"--job-name={job.job_id}", f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    if job.device.accelerator:
        lines.append(f"--gpus-per-node={per_node}")
    else:
        lines.append(f"--cpus-per-task={per_node}")
    lines += [f"--signal=B:USR1@{WARNING_S}", "--requeue", "--open-mode=append"]
    for flag, value in (("--partition", opts.partition), ("--time", opts.time)):
        lines += [f"{flag}={sbatch_value(value, flag)}"] if value else []
    return [f"#SBATCH {line}" for line in lines]


def train_argv(job: JobSpec, opts: SlurmOptions) -> list[str]:
    """The command each srun task runs: the same config and -o overrides as given to submit.py."""
    script = train_script(opts.checkout)
    entry = [script] if script else ["-m", "paddledist", "train"]
    argv = [opts.python, *entry, "-c", job.config_path]
    for item in job.overrides:
        argv += ["-o", item]
    return argv


def resume_lines(job: JobSpec) -> list[str]:
    """Bash that sets `resume` to the -o for rank 0's last checkpoint in a requeued run (none if -o gave one)."""
    if any(item.startswith("Train.resume_path=") for item in job.overrides):
        return ["resume=()"]
    latest = f"{job.output.rstrip('/')}/latest/latest.pdparams"
    return ["resume=()",
            "# A requeued run (time limit or preemption, below) continues from rank 0's last checkpoint.",
            f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] && [ -e {shlex.quote(latest)} ]; then',
            f"    resume=(-o {shlex.quote('Train.resume_path=' + latest)})",
            "fi"]


def secret_lines(opts: SlurmOptions) -> list[str]:
    """Bash that makes one job secret per run (unless one is given) for srun to pass to every node's command."""
    make = shlex.join([opts.python, "-c", "import secrets; print(secrets.token_hex(32))"])
    return ["# The machines authenticate their control connections with one secret made here (docs/security.md);",
            "# srun passes this shell's environment to every node's command.",
            f'export PADDLEDIST_JOB_SECRET="${{PADDLEDIST_JOB_SECRET:-$({make})}}"']


def render(job: JobSpec, opts: SlurmOptions) -> str:
    """The whole sbatch script."""
    srun = ["srun", "--nodes", str(job.nodes), "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            *train_argv(job, opts)]
    body = [
        "#!/bin/bash",
        f"# Written by `tools/submit.py --emit slurm` for {job.config_path!r}; submit with `sbatch <this file>`.",
        "# The nodes come from Slurm (SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NODEID): nothing here names one.",
        *sbatch_lines(job, opts),
        "set -euo pipefail",
        *secret_lines(opts),
        *resume_lines(job),
        "# USR1 (120 s before the end): the step saves latest at one agreed step and exits 75 (|| true: set -e"
        "\n# would otherwise end this script there), then the job is requeued and resumes.",
        f"trap 'echo \"paddledist: job $SLURM_JOB_ID ends in {WARNING_S} s: saving latest, then requeueing it\" >&2; "
        "kill -USR1 \"$step\" 2>/dev/null; wait \"$step\" || true; scontrol requeue \"$SLURM_JOB_ID\"' USR1",
        " ".join(map(shlex.quote, srun)) + ' "${resume[@]}" &',
        "step=$!",
        "# `wait` returns early when the trap runs; keep waiting until the srun step itself has ended.",
        'while true; do wait "$step" && exit 0; code=$?; kill -0 "$step" 2>/dev/null || exit "$code"; done',
    ]
    return "\n".join(body) + "\n"

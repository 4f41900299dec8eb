"""Scheduler files for a config: an sbatch script (Slurm) or a Kubeflow PaddleJob manifest (Kubernetes).

    python tools/submit.py -c configs/image_classification.yaml -o Train.epochs_iters=5 --emit slurm --nodes 2
    python tools/submit.py -c my.yaml --emit k8s --nodes 4 --image registry.example/paddledist:1 --out job.yaml

A pure builder like paddledist.launch: the config is loaded and validated here (a mistake is one line, exit 2,
before any file is written), the job is described by a `JobSpec`, and `slurm.render` / `k8s.render` turn it
into text. Neither file names machines: the scheduler chooses them, and the training command finds them from
the scheduler's environment (SLURM_JOB_NODELIST, the operator's PADDLE_MASTER / PADDLE_NNODES).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from paddledist.config.device import DeviceSpec, parse_device
from paddledist.config.overrides import split_overrides
from paddledist.config.nodecount import parse_nnodes
from paddledist.errors import UserError

NODE_KEYS = ("dist_ips", "nnodes", "dist_master")
"""Train keys that say which machines take part: under a scheduler the scheduler says it. From `-o`, dist_ips
and nnodes only give the node count and are left out of the emitted command; dist_master, or any of them in
the config file, is refused (the training command would meet there instead of where the scheduler says)."""


@dataclass(frozen=True)
class JobSpec:
    """What both emitters need to know about one training job."""

    config_path: str
    """Absolute path of the config file (a packaged config's name resolved to its file), as the nodes read it."""
    config_text: str
    """The config file's text (a ConfigMap ships it to the pods)."""
    overrides: tuple[str, ...]
    """The user's `-o` items, in order, without Train.dist_ips and Train.nnodes."""
    nodes: int
    """Machines (Slurm nodes, PaddleJob workers); one training command each."""
    device: DeviceSpec
    """Global.device: worker processes and cards per machine."""
    job_id: str
    """Train.job_id: the Slurm job name and the source of the PaddleJob's name."""
    port: int
    """Train.port: the job's etcd on the first machine (the PaddleJob's `master` port is the next one)."""
    output: str
    """Global.output as configured (relative paths mean the job's working folder)."""


def build_job(config: str, overrides: Sequence[str], nodes: Optional[int]) -> JobSpec:
    """Load and validate the config with its overrides, and work out the node count; UserError on mistakes."""
    from paddledist.cli import resolve_config
    from paddledist.config import load
    from paddledist.config.safeload import read_yaml

    path, implied = resolve_config(config)
    if not os.path.isfile(path):
        raise UserError(f"-c {config}: no such config file; give a YAML file or a packaged config name "
                        "such as image_classification")
    keys = [key for key, _ in split_overrides(overrides)]
    data = read_yaml(path, "config file (-c)")
    section = data.get("Train") if isinstance(data, dict) else None  # a malformed file: load() says why
    refuse_machine_keys(config, section if isinstance(section, dict) else {}, keys)
    cfg = load(path, [*implied, *overrides])
    kept = tuple(item for item, key in zip(overrides, keys) if key not in (f"Train.{k}" for k in NODE_KEYS))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return JobSpec(config_path=os.path.abspath(path), config_text=text, overrides=kept,
                   nodes=node_count(cfg, nodes), device=parse_device(cfg.Global.device), job_id=cfg.Train.job_id,
                   port=cfg.Train.port, output=cfg.Global.output)


def refuse_machine_keys(config: str, train_section: dict, override_keys: Sequence[str]) -> None:
    """UserError for a config file that names the machines, or an `-o Train.dist_master`."""
    named = [f"Train.{key}" for key in NODE_KEYS if train_section.get(key) is not None]
    if named:
        raise UserError(f"{config} sets {', '.join(named)}: under a scheduler the machines come from the scheduler; "
                        "remove it from the file and give the node count with --nodes N")
    if "Train.dist_master" in override_keys:
        raise UserError("-o Train.dist_master: under a scheduler the master address comes from the scheduler "
                        "(SLURM_JOB_NODELIST, the operator's PADDLE_MASTER); leave it out and give --nodes N")


def node_count(cfg, nodes: Optional[int]) -> int:
    """--nodes, else Train.nnodes (where the schema has it), else the length of an `-o Train.dist_ips` list, else 1."""
    listed = len(cfg.Train.dist_ips or ())
    count = parse_nnodes(getattr(cfg.Train, "nnodes", None))
    configured = count.most if count else None  # a range MIN:MAX asks for MAX nodes
    if nodes is None:
        return int(configured or listed or 1)
    if nodes < 1:
        raise UserError(f"--nodes {nodes}: give a node count of 1 or more")
    claims = ((listed, f"-o Train.dist_ips lists {listed} machines"),
              (configured, f"-o Train.nnodes={cfg.Train.nnodes}"))
    for given, what in claims:
        if given and given != nodes:
            raise UserError(f"--nodes {nodes} but {what}; drop one of the two")
    return nodes


def dense_ids(device: DeviceSpec, where: str) -> int:
    """Cards per machine; a scheduler numbers the cards it gives a job 0..n-1, so ids must be exactly that."""
    if device.accelerator and device.ids != tuple(range(device.nproc)):
        ids = ",".join(map(str, range(device.nproc)))
        raise UserError(f"Global.device={device.kind}:{','.join(map(str, device.ids))}: {where} numbers the "
                        f"{device.nproc} cards it grants 0..{device.nproc - 1}; use Global.device={device.kind}:{ids}")
    return device.nproc


def train_script(checkout: str) -> Optional[str]:
    """The checkout's tools/train.py, or None in an installed wheel (then `-m paddledist train` runs it)."""
    path = os.path.join(checkout, "tools", "train.py")
    return path if os.path.isfile(path) else None


def write_output(text: str, out: Optional[str], force: bool, private: bool = False) -> None:
    """`text` to `out` (atomically; an existing file only with --force; readable by its owner only when
    `private`: it holds a job secret), or to stdout without --out."""
    from paddledist.fsio import atomic_write

    if out is None:
        sys.stdout.write(text)
        return
    if os.path.exists(out) and not force:
        raise UserError(f"--out {out} exists; choose another file or add --force to replace it")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise UserError(f"--out {out}: folder {os.path.dirname(os.path.abspath(out))} does not exist")
    atomic_write(out, text, mode=0o600 if private else None)

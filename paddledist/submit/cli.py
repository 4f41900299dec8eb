"""`tools/submit.py`: parse, build the JobSpec, render the chosen scheduler file, write it."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from paddledist.errors import OUTPUT_ERROR_EXIT, USER_ERROR_EXIT, OutputWriteError, UserError

EMITTERS = ("slurm", "k8s")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit code 2 like every other user error."""

    def error(self, message: str) -> None:
        raise UserError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    from paddledist.submit import k8s

    p = _Parser(prog="tools/submit.py", description="write a Slurm sbatch script or a Kubeflow PaddleJob "
                "manifest that trains this config on a scheduler's machines")
    p.add_argument("-c", "--config", required=True, help="YAML config file (or a packaged config's name)")
    p.add_argument("-o", "--override", action="append", nargs="+", default=[], metavar="Section.key=value",
                   help="config overrides, passed on to every machine's tools/train.py")
    p.add_argument("--emit", required=True, help="slurm (sbatch script) or k8s (ConfigMap + PaddleJob)")
    p.add_argument("--out", help="file to write (default: standard output); never replaced without --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument("--nodes", type=int,
                   help="machines (default: Train.nnodes, or the length of -o Train.dist_ips, or 1)")
    s = p.add_argument_group("slurm")
    s.add_argument("--python", default=sys.executable, help="interpreter on the nodes (default: this one)")
    s.add_argument("--partition", help="#SBATCH --partition")
    s.add_argument("--time", help="#SBATCH --time, e.g. 04:00:00")
    k = p.add_argument_group("k8s")
    k.add_argument("--image", default=k8s.DEFAULT_IMAGE, help=f"container image (default {k8s.DEFAULT_IMAGE})")
    k.add_argument("--workdir", default=k8s.DEFAULT_WORKDIR, help="the checkout inside the image")
    k.add_argument("--config-dir", default=k8s.DEFAULT_CONFIG_DIR, help="where the ConfigMap is mounted")
    k.add_argument("--name", help="PaddleJob name (default: Train.job_id)")
    k.add_argument("--namespace", help="Kubernetes namespace of the objects")
    k.add_argument("--accelerator-resource", help="extended resource for the cards (default nvidia.com/gpu)")
    return p


def render(args: argparse.Namespace) -> str:
    from paddledist import bundled
    from paddledist.submit import build_job, k8s, slurm

    if args.emit not in EMITTERS:
        raise UserError(f"--emit {args.emit}: unknown scheduler; use --emit slurm or --emit k8s")
    job = build_job(args.config, [item for group in args.override for item in group], args.nodes)
    if args.emit == "slurm":
        opts = slurm.SlurmOptions(python=args.python, checkout=bundled.CHECKOUT, partition=args.partition,
                                  time=args.time)
        return slurm.render(job, opts)
    opts = k8s.K8sOptions(image=args.image, workdir=args.workdir, config_dir=args.config_dir, name=args.name,
                          namespace=args.namespace, accelerator_resource=args.accelerator_resource)
    return k8s.render(job, opts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from paddledist.submit import write_output

    try:
        args = build_parser().parse_args(argv)
        text = render(args)
        write_output(text, args.out, args.force, private=args.emit == "k8s")  # its Secret holds the job secret
        if args.out:
            print(f"paddledist: wrote {args.out} ({args.emit})", file=sys.stderr)
        return 0
    except (UserError, OutputWriteError) as e:
        print(f"paddledist: error: {e}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT if isinstance(e, UserError) else OUTPUT_ERROR_EXIT

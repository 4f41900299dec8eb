"""Scheduler files for a config: `python tools/submit.py -c cfg.yaml [-o Section.key=value ...] --emit slurm|k8s
[--nodes N] [--out FILE [--force]]`. See docs/multi_machine.md, sections Slurm and Kubernetes."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddledist.submit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

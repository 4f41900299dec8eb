"""Command-line entry shared by tools/*.py and `python -m paddledist`: parse, load, run, map errors to exit codes."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from paddledist.errors import USER_ERROR_EXIT, UserError


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="paddledist: PaddleX-style distributed image classification")
    parser.add_argument("-c", "--config", required=True, help="YAML config file")
    parser.add_argument("-o", "--override", action="append", nargs="+", default=[], metavar="Section.key=value",
                        help="override a config value (repeatable; several pairs may follow one -o)")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate everything, print what would run, exit 0 without training or writing")
    return parser


def main(argv: Optional[Sequence[str]] = None, mode: Optional[str] = None, prog: str = "paddledist") -> int:
    """Run the stages named by `mode` (a tool's fixed stage) or by `Global.mode`; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    overrides = [item for group in args.override for item in group]
    try:
        from paddledist.config import load

        cfg = load(args.config, overrides + ([f"Global.mode={mode}"] if mode else []))
        from paddledist.stages import run_pipeline  # after the config: its mistakes are reported fast

        return run_pipeline(cfg, args.config, overrides, dry_run=args.dry_run)
    except UserError as e:
        print(f"paddledist: error: {e}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT
    except KeyboardInterrupt:
        print("paddledist: interrupted", file=sys.stderr, flush=True)
        return 130


def console_main() -> None:
    sys.exit(main())

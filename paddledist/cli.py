"""Command-line entry shared by tools/*.py and `python -m paddledist`: parse, load, run, map errors to exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional, Sequence

from paddledist.errors import OUTPUT_ERROR_EXIT, USER_ERROR_EXIT, OutputWriteError, UserError


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog,
                                     description="paddledist: PaddleX-style distributed image classification")
    parser.add_argument("-c", "--config", required=True, help="YAML config file")
    parser.add_argument("-o", "--override", action="append", nargs="+", default=[], metavar="Section.key=value",
                        help="override a config value (repeatable; several pairs may follow one -o)")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate everything, print what would run, exit 0 without training or writing")
    return parser


MODES = ("check_dataset", "train", "evaluate", "export", "predict", "doctor")
"""`paddledist <mode> -c ...` runs that stage, like tools/<mode>.py; without one, Global.mode decides."""


def split_mode(argv: Sequence[str], mode: Optional[str]) -> tuple[list[str], Optional[str]]:
    """A leading mode word (`paddledist train -c ...`) taken off argv; a tool's fixed mode wins."""
    argv = list(argv)
    if argv and argv[0] in MODES and mode is None:
        return argv[1:], argv[0]
    return argv, mode


def resolve_config(path: str) -> tuple[str, list[str]]:
    """`-c` as given, or the packaged config of that name (`-c image_classification`) when no such file exists;
    with the overrides that point a packaged config's relative dataset at the bundled copy."""
    from paddledist import bundled

    if not os.path.exists(path) and bundled.config_path(path):
        path = bundled.config_path(path)
    return path, bundled.dataset_override(path)


def report_main(argv: Sequence[str]) -> int:
    """`paddledist report <Global.output>`: write report.html of that run from its result files (no paddle)."""
    parser = argparse.ArgumentParser(prog="paddledist report", description="write report.html of a run")
    parser.add_argument("output", help="the run's Global.output folder")
    args = parser.parse_args(argv)

    def write() -> int:
        from paddledist import report

        print(f"paddledist: wrote {report.write(args.output)}", flush=True)
        return 0

    return exit_code(write)


def main(argv: Optional[Sequence[str]] = None, mode: Optional[str] = None, prog: str = "paddledist") -> int:
    """Run the stages named by `mode` (a tool's fixed stage, or a leading mode word) or by `Global.mode`;
    returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if mode is None and argv and argv[0] == "report":
        return report_main(argv[1:])
    argv, mode = split_mode(argv, mode)
    args = build_parser(prog).parse_args(argv)

    def run() -> int:
        from paddledist import paddle_version
        from paddledist.config import load

        paddle_version.check()
        config, implied = resolve_config(args.config)
        overrides = implied + [item for group in args.override for item in group]
        check_fixed_mode(prog, mode, overrides)
        cfg = load(config, overrides + ([f"Global.mode={mode}"] if mode else []))
        from paddledist.stages import run_pipeline  # after the config: its mistakes are reported fast

        return run_pipeline(cfg, config, overrides, dry_run=args.dry_run)

    return exit_code(run)


def check_fixed_mode(prog: str, mode: Optional[str], overrides: Sequence[str]) -> None:
    """A tool (or a leading mode word) fixes the stage: an -o Global.mode asking for another is a UserError,
    not silently replaced (a job script that meant to evaluate must not train)."""
    from paddledist.config.overrides import parse_value, split_overrides

    asked = [raw for key, raw in split_overrides(overrides) if key == "Global.mode"]
    if mode is None or not asked:
        return
    value = parse_value(asked[-1])
    wanted = value if isinstance(value, list) else str(value).split(",")
    if [str(w).strip() for w in wanted] != [mode]:
        raise UserError(f"{prog} runs the {mode} stage, but -o Global.mode={asked[-1]} asks for another; run "
                        f"tools/main.py (or paddledist without a mode word) for Global.mode, or drop the override")


def exit_code(action: Callable[[], int]) -> int:
    """action()'s code, or a user's mistake as one line and exit 2 (a failed write: exit 3; Ctrl-C: 130)."""
    try:
        return action()
    except UserError as e:
        print(f"paddledist: error: {e}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT
    except OutputWriteError as e:
        print(f"paddledist: error: {e}", file=sys.stderr, flush=True)
        return OUTPUT_ERROR_EXIT
    except KeyboardInterrupt:
        print("paddledist: interrupted", file=sys.stderr, flush=True)
        return 130


def console_main() -> None:
    sys.exit(main())

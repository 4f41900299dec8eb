"""The check_dataset stage: check the dataset, optionally re-split it, and write PaddleX's result files.

Runs on every machine of a job (each checks its own copy of the data); the first machine writes
`<Global.output>/check_dataset_result.json` and `<Global.output>/check_dataset/histogram.png`. On bad data
every problem is printed on its own line (file:line: what), the json says `done_flag: false`, and the
stage ends with a one-line UserError (exit code 2). Imports nothing of paddle: it starts fast.
"""

from __future__ import annotations

import os
import sys

from paddledist.config import Config
from paddledist.data.formats import detect_format
from paddledist.engine.distenv import DistEnv
from paddledist.runfiles.results import write_json
from paddledist.errors import UserError
from paddledist.stages import dataset_check, dataset_split, histogram

RESULT = "check_dataset_result.json"
HISTOGRAM = os.path.join("check_dataset", "histogram.png")
MAX_PRINTED = 100
"""Problems printed to the console; the json lists them all."""
CONVERTERS: tuple[str, ...] = ()
"""src_dataset_type values CheckDataset.convert accepts: PaddleX has no converter for image classification."""


def preflight(cfg: Config) -> str:
    """Config mistakes, raised before anything is read or written; returns the dataset format."""
    convert = cfg.CheckDataset.convert
    if convert.enable and convert.src_dataset_type not in CONVERTERS:
        raise UserError(f"CheckDataset.convert.src_dataset_type: {convert.src_dataset_type!r} cannot be converted "
                        "(image classification has no converters; PaddleX has none either); provide a ClsDataset "
                        "and set -o CheckDataset.convert.enable=false")
    fmt = detect_format(cfg.Global.dataset_dir)
    if cfg.CheckDataset.split.enable and fmt != "cls":
        raise UserError(f"CheckDataset.split: {cfg.Global.dataset_dir} is a {dataset_check.FORMAT_NAMES[fmt]} "
                        "dataset; only a ClsDataset's train.txt/val.txt can be re-split "
                        "(set -o CheckDataset.split.enable=false)")
    return fmt


def run(cfg: Config, dist: DistEnv) -> None:
    from paddledist import launch

    fmt = preflight(cfg)
    g, split = cfg.Global, cfg.CheckDataset.split
    what = "every list line and image" if fmt == "cls" else "counts and labels"
    print(f"paddledist: check_dataset: checking {g.dataset_dir} ({what})", flush=True)
    report = dataset_check.check(g.dataset_dir, fmt, cfg.Train.num_classes, g.seed)
    resplit = None
    if report.ok and split.enable:
        resplit = dataset_split.resplit(g.dataset_dir, split.train_percent, g.seed)
        if resplit:  # the same files, listed differently: recount without decoding again
            report = dataset_check.check(g.dataset_dir, fmt, cfg.Train.num_classes, g.seed, decode=False)
    _print_report(report, resplit, split.enable)
    result_path = None
    if launch.is_first_machine(cfg):
        result_path = write_result(cfg, report, resplit)
    if not report.ok:
        raise UserError(summary(report, g.dataset_dir, result_path))


def write_result(cfg: Config, report: dataset_check.Report, resplit) -> str:
    """PaddleX's check_dataset_result.json (paths relative to Global.output) and the histogram PNG."""
    out = cfg.Global.output
    os.makedirs(os.path.join(out, os.path.dirname(HISTOGRAM)), exist_ok=True)
    counts = {s: histogram.class_counts(report.labels.get(s, []), cfg.Train.num_classes) for s in dataset_check.SPLITS}
    histogram.draw(counts["train"], counts["val"], os.path.join(out, HISTOGRAM))
    attributes = {"num_classes": report.num_classes, "label_names": report.label_names}
    for s in dataset_check.SPLITS:
        attributes[f"{s}_samples"] = len(report.labels.get(s, []))
        attributes[f"{s}_sample_paths"] = report.paths.get(s, [])[:dataset_check.SAMPLE_PATHS]
    if report.dataset_type == "ClsDataset":
        attributes["label_file"] = os.path.join(cfg.Global.dataset_dir, "label.txt")
    data = {
        "done_flag": report.ok, "check_pass": report.ok, "dataset_path": cfg.Global.dataset_dir,
        "dataset_type": report.dataset_type, "show_type": "image", "attributes": attributes,
        "analysis": {"histogram": HISTOGRAM, "class_counts": counts},
        "split": resplit, "warnings": report.warnings,
        "problems": [{"kind": p.kind, "where": p.where, "message": p.message} for p in report.problems],
    }
    path = os.path.join(out, RESULT)
    write_json(path, data)
    return path


def _print_report(report: dataset_check.Report, resplit, split_enabled: bool) -> None:
    for warning in report.warnings:
        print(f"paddledist: check_dataset: warning: {warning}", flush=True)
    if resplit:
        print(f"paddledist: check_dataset: re-split train+val {resplit['train_percent']}/{resplit['val_percent']} "
              f"with seed {resplit['seed']}; originals kept as {', '.join(resplit['backups'].values())}", flush=True)
    elif split_enabled and report.ok:
        print("paddledist: check_dataset: the lists already hold this split; nothing rewritten", flush=True)
    for problem in report.problems[:MAX_PRINTED]:
        print(f"paddledist: check_dataset: {problem}", file=sys.stderr, flush=True)
    if len(report.problems) > MAX_PRINTED:
        print(f"paddledist: check_dataset: ... and {len(report.problems) - MAX_PRINTED} more problem(s)",
              file=sys.stderr, flush=True)
    if report.ok:
        sizes = ", ".join(f"{s} {len(report.labels.get(s, []))}" for s in dataset_check.SPLITS)
        print(f"paddledist: check_dataset: passed: {report.dataset_type}, {report.num_classes} classes, {sizes} "
              "samples", flush=True)


def summary(report: dataset_check.Report, dataset_dir: str, result_path) -> str:
    kinds = ", ".join(f"{n} {dataset_check.KINDS[k][n > 1]}" for k, n in report.counts().items())
    where = f"; all in {result_path}" if result_path else ""
    return (f"check_dataset: {len(report.problems)} problem(s) in {dataset_dir}: {kinds} (each listed above"
            f"{where}); fix the dataset and run check_dataset again")

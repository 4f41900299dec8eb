"""What check_dataset verifies, as functions that return problems instead of stopping at the first one.

PaddleX checks the layout, label.txt, both split lists, that each line reads `path label` and that each
listed image exists. This adds: labels within [0, Train.num_classes), every image decodes, label.txt ids
unique and contiguous from 0, non-empty splits, and file names with spaces (which a space-separated list
cannot hold). Nothing here prints or writes; check_dataset.py reports.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from paddledist.config.safeload import MAX_LIST_BYTES, read_text
from paddledist.data.formats import (MAX_CLASSES, SYNTHETIC, DecodeError, decode_image, is_int_label, load_samples,
                                     outside)
from paddledist.errors import UserError

SPLITS = ("train", "val")
SAMPLE_PATHS = 10
"""How many sample paths per split the result lists (PaddleX shows a few)."""

KINDS = {  # kind -> (one, several), for the summary line
    "missing_file": ("missing file", "missing files"), "undecodable": ("undecodable image", "undecodable images"),
    "label_range": ("label out of range", "labels out of range"), "bad_line": ("malformed line", "malformed lines"),
    "space_in_name": ("file name with spaces", "file names with spaces"),
    "label_file": ("label.txt problem", "label.txt problems"),
    "missing_list": ("missing split list", "missing split lists"),
    "empty_split": ("empty split", "empty splits"), "dataset": ("unreadable dataset", "unreadable dataset parts"),
}
FORMAT_NAMES = {"cls": "ClsDataset", "cifar10": "Cifar10", SYNTHETIC: "Synthetic"}


@dataclass(frozen=True)
class Problem:
    kind: str
    """A key of KINDS."""
    where: str
    """`file:line`, a file, or a sample name."""
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class Report:
    dataset_type: str
    num_classes: int
    """Classes the dataset declares (label.txt lines, or the format's classes)."""
    label_names: list[str]
    labels: dict[str, list[int]] = field(default_factory=dict)
    """Per split, the label of every well-formed line."""
    paths: dict[str, list[str]] = field(default_factory=dict)
    """Per split, every listed image path (or sample name)."""
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.problems:
            out[p.kind] = out.get(p.kind, 0) + 1
        return out


def check(dataset_dir: str, fmt: str, num_classes: int, seed: int = 0, decode: bool = True) -> Report:
    """Check the dataset at `dataset_dir` (its format as detect_format names it)."""
    if fmt == "cls":
        return check_cls(dataset_dir, num_classes, decode)
    return check_arrays(dataset_dir, fmt, num_classes, seed)


def check_cls(dataset_dir: str, num_classes: int, decode: bool = True) -> Report:
    names, problems = check_label_file(os.path.join(dataset_dir, "label.txt"), num_classes)
    report = Report("ClsDataset", len(names), names, problems=problems)
    for split in SPLITS:
        rows = _check_list(dataset_dir, split, num_classes, report)
        if rows is None:
            continue
        if decode:
            report.problems += check_images(rows)
        else:
            report.problems += [_missing(where, rel, full) for where, rel, full in rows if not os.path.isfile(full)]
    if not names:  # no usable label.txt: count what the lists use
        report.num_classes = max((max(v) + 1 for v in report.labels.values() if v), default=0)
    report.warnings += _overlap_warnings(report)
    report.problems.sort(key=_position)
    return report


def _position(problem: Problem) -> tuple[str, int]:
    """Sort key: file, then line (label.txt, train.txt, val.txt happen to sort in reading order)."""
    file, _, line = problem.where.rpartition(":")
    return (file, int(line)) if line.isdigit() else (problem.where, 0)


def check_label_file(path: str, num_classes: int) -> tuple[list[str], list[Problem]]:
    """label.txt: one `id name` line per class, ids unique and 0..n-1, n = Train.num_classes."""
    if not os.path.isfile(path):
        return [], [Problem("label_file", path, "label file missing (a ClsDataset needs label.txt with one "
                                                "'id name' line per class)")]
    names: dict[int, str] = {}
    first_line: dict[int, int] = {}
    problems = []
    for lineno, line in enumerate(read_text(path, "label.txt").split("\n"), 1):
        key, _, name = line.strip().partition(" ")
        if not key:
            continue
        where = f"{path}:{lineno}"
        if not is_int_label(key) or key.startswith("-") or int(key) >= MAX_CLASSES:
            problems.append(Problem("label_file", where,
                                    f"expected 'id name' with an integer id, got {line.strip()!r}"))
        elif int(key) in names:
            problems.append(Problem("label_file", where, f"duplicate label id {int(key)} (first on line "
                                                         f"{first_line[int(key)]})"))
        else:
            names[int(key)], first_line[int(key)] = name.strip() or key, lineno
    problems += _label_id_problems(path, sorted(names), num_classes)
    return [names.get(i, str(i)) for i in range(max(names, default=-1) + 1)], problems


def _label_id_problems(path: str, ids: list[int], num_classes: int) -> list[Problem]:
    problems = []
    gaps = sorted(set(range(max(ids, default=-1) + 1)) - set(ids))
    if gaps:
        shown = ", ".join(map(str, gaps[:10])) + (", ..." if len(gaps) > 10 else "")
        problems.append(Problem("label_file", path, f"label ids are not contiguous from 0: missing {shown}"))
    declared = max(ids, default=-1) + 1
    if ids and not gaps and declared != num_classes:
        problems.append(Problem("label_file", path, f"declares {declared} classes but Train.num_classes={num_classes}; "
                                                    f"set -o Train.num_classes={declared} or fix label.txt"))
    if not ids:
        problems.append(Problem("label_file", path, "no 'id name' lines"))
    return problems


def _check_list(dataset_dir: str, split: str, num_classes: int, report: Report) -> Optional[list]:
    """Parse `<split>.txt`, recording labels, paths and line problems; returns (where, rel, full) per good line."""
    list_path = os.path.join(dataset_dir, f"{split}.txt")
    if not os.path.isfile(list_path):
        report.problems.append(Problem("missing_list", list_path, f"split list missing (a ClsDataset needs "
                                                                  f"{', '.join(s + '.txt' for s in SPLITS)})"))
        return None
    rows, labels, paths = [], [], []
    for lineno, line in enumerate(read_text(list_path, f"the {split} list", MAX_LIST_BYTES).split("\n"), 1):
        parsed = _parse_line(f"{list_path}:{lineno}", line, num_classes, report.problems)
        if parsed is None:
            continue
        rel, label = parsed
        labels.append(label)
        paths.append(os.path.join(dataset_dir, rel))
        rows.append((f"{list_path}:{lineno}", rel, paths[-1]))
    report.labels[split], report.paths[split] = labels, paths
    if not labels:
        report.problems.append(Problem("empty_split", list_path, f"the {split} split has no samples"))
    return rows


def _parse_line(where: str, line: str, num_classes: int, problems: list) -> Optional[tuple[str, int]]:
    parts = line.split()
    if not parts:
        return None
    if len(parts) > 2 and _is_int(parts[-1]):
        name = line.strip().rsplit(None, 1)[0]
        problems.append(Problem("space_in_name", where, f"file name has spaces: {name!r}; rename the file (list "
                                                        "lines are 'path label' separated by one space)"))
        return None
    if len(parts) != 2:
        problems.append(Problem("bad_line", where, f"expected 'path label', got {line.strip()!r}"))
        return None
    rel, label = parts
    if not _is_int(label):
        problems.append(Problem("bad_line", where, f"label {label[:40]!r} is not an integer of at most 9 digits"))
        return None
    if outside(rel):
        problems.append(Problem("outside", where, f"{rel[:200]!r} is outside the dataset folder; list paths "
                                                  "relative to it (or set Global.allow_outside_paths=true)"))
        return None
    if not 0 <= int(label) < num_classes:
        problems.append(Problem("label_range", where, f"{rel}: label {int(label)} is outside [0, Train.num_classes="
                                                      f"{num_classes})"))
    return rel, int(label)


def _is_int(text: str) -> bool:
    return is_int_label(text)


def check_images(rows: list) -> list[Problem]:
    """Every listed image exists and decodes; threads, since PIL releases the GIL while decoding."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        found = pool.map(lambda row: _image_problem(*row), rows)
        return [p for p in found if p is not None]


def _image_problem(where: str, rel: str, full: str) -> Optional[Problem]:
    if not os.path.isfile(full):
        return _missing(where, rel, full)
    try:
        decode_image(full)
    except DecodeError as e:
        return Problem("undecodable", where, f"{rel}: cannot decode image ({str(e).removeprefix(full + ': ')})")
    return None


def _missing(where: str, rel: str, full: str) -> Problem:
    return Problem("missing_file", where, f"{rel}: file not found ({full})")


def _overlap_warnings(report: Report) -> list[str]:
    both = set(report.paths.get("train", ())) & set(report.paths.get("val", ()))
    if not both:
        return []
    return [f"{len(both)} image(s) are listed in both train.txt and val.txt (e.g. {sorted(both)[0]}); "
            "validation accuracy will look better than it is"]


def check_arrays(dataset_dir: str, fmt: str, num_classes: int, seed: int) -> Report:
    """CIFAR-10 batches and synthetic data: counts and label range (decoding is trivially fine: arrays)."""
    report = Report(FORMAT_NAMES[fmt], 0, [])
    for split in SPLITS:
        try:
            samples = load_samples(dataset_dir, split, seed)
        except UserError as e:
            report.problems.append(Problem("dataset", dataset_dir, str(e)))
            continue
        report.label_names = report.label_names or list(samples.label_names)
        report.labels[split], report.paths[split] = [int(v) for v in samples.labels], list(samples.names)
        report.problems += [Problem("label_range", samples.names[i], f"label {int(v)} is outside [0, "
                                                                     f"Train.num_classes={num_classes})")
                            for i, v in enumerate(samples.labels) if not 0 <= v < num_classes]
        if len(samples) == 0:
            report.problems.append(Problem("empty_split", dataset_dir, f"the {split} split has no samples"))
    report.num_classes = len(report.label_names)
    return report

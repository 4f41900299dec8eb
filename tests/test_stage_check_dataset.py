"""check_dataset: every problem named with file and line, PaddleX's result file, re-splitting that keeps the
originals, and the CIFAR-10 / synthetic formats. Broken datasets are generated in temp dirs."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from paddledist.stages import dataset_check, dataset_split

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DIGITS = REPO / "dataset" / "digits"


def make_cls(root: Path, train: list[str], val: list[str], classes: int = 10, images: int = 20) -> Path:
    """A ClsDataset with `images` small PNGs (images/<i>.png) and the given list lines."""
    (root / "images").mkdir(parents=True)
    for i in range(images):
        Image.new("RGB", (8, 8), (i * 12 % 256, 40, 90)).save(root / "images" / f"{i}.png")
    (root / "label.txt").write_text("".join(f"{i} class{i}\n" for i in range(classes)))
    (root / "train.txt").write_text("".join(line + "\n" for line in train))
    (root / "val.txt").write_text("".join(line + "\n" for line in val))
    return root


def balanced(root: Path, per_class: int = 4, classes: int = 3) -> Path:
    rows = [f"images/{i}.png {i % classes}" for i in range(per_class * classes)]
    return make_cls(root, rows[: len(rows) * 3 // 4], rows[len(rows) * 3 // 4:], classes, per_class * classes)


def check(run_tool, *overrides: str):
    """tools/check_dataset.py with the default config and these -o overrides."""
    return run_tool("check_dataset.py", "-c", CONFIG, "-o", *overrides)


def result(out: Path) -> dict:
    return json.loads((out / "check_dataset_result.json").read_text())


# --- through tools/check_dataset.py ---------------------------------------------------------------------

def test_bundled_digits_pass_with_paddlex_result_keys(run_tool, tmp_path):
    out = tmp_path / "out"
    done = check(run_tool, f"Global.dataset_dir={DIGITS}", f"Global.output={out}")
    assert done.returncode == 0, done.stderr
    assert "passed: ClsDataset, 10 classes, train 1438, val 359 samples" in done.stdout
    r = result(out)
    assert r["done_flag"] is True and r["problems"] == []
    a = r["attributes"]
    assert (a["num_classes"], a["train_samples"], a["val_samples"]) == (10, 1438, 359)
    assert 0 < len(a["train_sample_paths"]) <= 10 and all(Path(p).is_file() for p in a["val_sample_paths"])
    assert sum(r["analysis"]["class_counts"]["val"]) == 359
    with Image.open(out / r["analysis"]["histogram"]) as png:
        assert png.format == "PNG" and png.size[0] >= 400


def test_broken_folder_names_missing_undecodable_and_out_of_range(run_tool, tmp_path):
    root = make_cls(tmp_path / "ds", ["images/0.png 0", "images/nope.png 1", "images/bad.png 2", "images/3.png 12"],
                    ["images/4.png 4"])
    (root / "images" / "bad.png").write_bytes(b"this is not a png")
    out = tmp_path / "out"
    done = check(run_tool, f"Global.dataset_dir={root}", f"Global.output={out}")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    train_txt = root / "train.txt"
    assert any(f"{train_txt}:2: images/nope.png: file not found" in x for x in lines)
    assert any(f"{train_txt}:3: images/bad.png: cannot decode image" in x for x in lines)
    assert any(f"{train_txt}:4: images/3.png: label 12 is outside [0, Train.num_classes=10)" in x for x in lines)
    assert "1 missing file, 1 undecodable image, 1 label out of range" in lines[-1]
    assert lines[-1].startswith("paddledist: error: check_dataset: 3 problem(s)") and "Traceback" not in done.stderr
    r = result(out)
    assert r["done_flag"] is False
    assert {p["kind"] for p in r["problems"]} == {"missing_file", "undecodable", "label_range"}


def test_convert_of_an_unsupported_type_is_a_clear_error_that_writes_nothing(run_tool, tmp_path):
    done = check(run_tool, f"Global.dataset_dir={DIGITS}", f"Global.output={tmp_path / 'o'}",
                 "CheckDataset.convert.enable=true", "CheckDataset.convert.src_dataset_type=LabelMe")
    assert done.returncode == 2
    assert "CheckDataset.convert.src_dataset_type: 'LabelMe' cannot be converted" in done.stderr
    assert not (tmp_path / "o").exists()


def test_split_rewrites_lists_keeps_backups_and_is_repeatable(run_tool, tmp_path):
    root = balanced(tmp_path / "ds", per_class=10)
    before = sorted((root / "train.txt").read_text().splitlines() + (root / "val.txt").read_text().splitlines())
    args = [f"Global.dataset_dir={root}", f"Global.output={tmp_path / 'out'}", "Train.num_classes=3",
            "CheckDataset.split.enable=true", "CheckDataset.split.train_percent=80",
            "CheckDataset.split.val_percent=20"]
    done = check(run_tool, *args)
    assert done.returncode == 0, done.stderr
    train, val = ((root / f"{s}.txt").read_text().splitlines() for s in ("train", "val"))
    assert (len(train), len(val)) == (24, 6) and sorted(train + val) == before
    assert {line.split()[1] for line in val} == {"0", "1", "2"}  # stratified: every class in val
    backups = sorted(p.name for p in root.glob("*.bak-*"))
    assert [b.split(".bak-")[0] for b in backups] == ["train.txt", "val.txt"]
    assert (root / backups[0]).read_text().splitlines() + (root / backups[1]).read_text().splitlines() != train + val
    r = result(tmp_path / "out")
    assert (r["attributes"]["train_samples"], r["split"]["val_samples"]) == (24, 6)
    again = check(run_tool, *args)
    assert again.returncode == 0 and "nothing rewritten" in again.stdout
    assert (root / "train.txt").read_text().splitlines() == train and len(list(root.glob("*.bak-*"))) == 2


def test_split_of_a_non_list_dataset_is_refused(run_tool, tmp_path):
    done = check(run_tool, "Global.dataset_dir=synthetic:64", f"Global.output={tmp_path}",
                 "CheckDataset.split.enable=true", "CheckDataset.split.train_percent=50",
                 "CheckDataset.split.val_percent=50")
    assert done.returncode == 2 and "only a ClsDataset's train.txt/val.txt can be re-split" in done.stderr


def write_cifar(root: Path, per_batch: int = 6, bad_label: bool = False) -> Path:
    root.mkdir()
    rng = np.random.RandomState(0)
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        labels = list(rng.randint(0, 10, per_batch))
        if bad_label and name == "test_batch":
            labels[1] = 11
        data = rng.randint(0, 256, (per_batch, 3072)).astype(np.uint8)
        with open(root / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": labels}, f)
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f)
    return root


def test_cifar10_batches_and_synthetic_report_counts(run_tool, tmp_path):
    root = write_cifar(tmp_path / "cifar")
    done = check(run_tool, f"Global.dataset_dir={root}", f"Global.output={tmp_path / 'a'}")
    assert done.returncode == 0, done.stderr
    a = result(tmp_path / "a")["attributes"]
    assert (a["train_samples"], a["val_samples"], a["label_names"][3]) == (30, 6, "c3")
    done = check(run_tool, "Global.dataset_dir=synthetic:160", f"Global.output={tmp_path / 's'}")
    assert done.returncode == 0, done.stderr
    r = result(tmp_path / "s")
    a = r["attributes"]
    assert (r["dataset_type"], a["train_samples"], a["val_samples"]) == ("Synthetic", 160, 20)


def test_cifar10_label_out_of_range_is_named(tmp_path):
    report = dataset_check.check(str(write_cifar(tmp_path / "cifar", bad_label=True)), "cifar10", 10)
    assert [str(p) for p in report.problems] == ["val[1]: label 11 is outside [0, Train.num_classes=10)"]


# --- the checks themselves, in process -------------------------------------------------------------------

def test_label_file_duplicates_gaps_and_class_count(tmp_path):
    path = tmp_path / "label.txt"
    path.write_text("0 cat\n1 dog\n1 wolf\n3 bird\nx y\n")
    names, problems = dataset_check.check_label_file(str(path), 4)
    assert names == ["cat", "dog", "2", "bird"]
    assert [str(p) for p in problems] == [f"{path}:3: duplicate label id 1 (first on line 2)",
                                          f"{path}:5: expected 'id name' with an integer id, got 'x y'",
                                          f"{path}: label ids are not contiguous from 0: missing 2"]
    path.write_text("0 cat\n1 dog\n")
    assert "declares 2 classes but Train.num_classes=4" in str(dataset_check.check_label_file(str(path), 4)[1][0])


def test_spaces_malformed_lines_empty_split_and_missing_label_file(tmp_path):
    root = make_cls(tmp_path / "ds", ["images/0.png 0", "images/my cat.png 1", "images/1.png", "images/2.png one"], [])
    (root / "label.txt").unlink()
    report = dataset_check.check_cls(str(root), 10)
    found = {(p.kind, p.where.rsplit("/", 1)[-1]) for p in report.problems}
    assert found == {("label_file", "label.txt"), ("space_in_name", "train.txt:2"), ("bad_line", "train.txt:3"),
                     ("bad_line", "train.txt:4"), ("empty_split", "val.txt")}
    assert report.num_classes == 1 and report.labels["train"] == [0]


def test_image_listed_in_both_splits_is_a_warning_not_a_failure(tmp_path):
    report = dataset_check.check_cls(str(make_cls(tmp_path / "ds", ["images/0.png 0"], ["images/0.png 0"])), 10)
    assert report.ok and "listed in both train.txt and val.txt" in report.warnings[0]


def test_assign_is_stratified_deterministic_and_complete():
    rows = [(f"img{i:02d}.png", i % 3) for i in range(30)] + [("single.png", 3)]
    train, val = dataset_split.assign(rows, 70, seed=7)
    assert sorted(train + val) == sorted(rows)
    assert [sum(1 for _, label in val if label == k) for k in range(4)] == [3, 3, 3, 0]
    assert dataset_split.assign(list(reversed(rows)), 70, seed=7) == (train, val)
    assert dataset_split.assign(rows, 70, seed=8) != (train, val)


@pytest.mark.parametrize("percent", [1, 99])
def test_assign_keeps_both_sides_of_every_class_with_two_or_more(percent):
    train, val = dataset_split.assign([(f"{i}.png", i % 2) for i in range(10)], percent, seed=0)
    assert {label for _, label in train} == {label for _, label in val} == {0, 1}

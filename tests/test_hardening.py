"""Hostile and careless inputs (issue 20) through the real CLI (tools/train.py in a subprocess): config bombs,
bad Global.output folders, out-of-range sizes, bad list files. Each exits with code 2 within 15 s, prints one
line and no traceback, and leaves an existing Global.output byte-for-byte as it was (checked with the same
snapshot as tests/test_bad_inputs.py: kinds, sizes, mtimes, contents, link targets)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.files import snapshot

pytestmark = pytest.mark.multiproc

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "image_classification.yaml"
DIGITS = REPO / "dataset" / "digits"
NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]
"""Root without the capabilities that ignore file modes: a mode-000 folder is then unreadable, as for a user."""


def bomb(levels: int = 8, width: int = 9) -> str:
    names = [f"l{i}" for i in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['x'] * width)}]"]
    lines += [f"{n}: &{n} [{', '.join(['*' + p] * width)}]" for p, n in zip(names, names[1:])]
    return "\n".join(lines) + "\n"


@pytest.fixture
def out(tmp_path) -> Path:
    """A previous run's output folder (what must survive every refused run)."""
    root = tmp_path / "out"
    (root / "logs").mkdir(parents=True)
    (root / "config.yaml").write_text("Global:\n  model: LeNet\n  seed: 7\n")
    (root / "train_result.json").write_text('{"done_flag": true}\n')
    (root / "logs" / "train.rank0.log").write_text("epoch 1/1\n")
    (root / "best_model").mkdir()
    (root / "best_model" / "best_model.pdparams").write_bytes(b"\x80weights")
    return root


@pytest.fixture
def data(tmp_path) -> Path:
    """A 40/10-image copy of the bundled digits to break."""
    root = tmp_path / "digits"
    (root / "images").mkdir(parents=True)
    shutil.copy(DIGITS / "label.txt", root / "label.txt")
    for split, count in (("train", 40), ("val", 10)):
        rows = (DIGITS / f"{split}.txt").read_text().split("\n")[:count]
        for row in rows:
            shutil.copy(DIGITS / row.split()[0], root / row.split()[0])
        (root / f"{split}.txt").write_text("\n".join(rows) + "\n")
    return root


def run_cli(cwd: Path, config: Path, *overrides: str, prefix=(),
            dry_run=False) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([*prefix, sys.executable, str(REPO / "tools" / "train.py"), "-c", str(config),
                           *(["-o", *overrides] if overrides else []), *(["--dry-run"] if dry_run else [])],
                          cwd=cwd, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return done, time.monotonic() - start


def assert_one_line(done: subprocess.CompletedProcess, elapsed: float, *fragments: str) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paddledist: error: "), done.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert elapsed < 15, f"took {elapsed:.1f} s"
    return lines[0]


# --- config files: (id, file text or None for a FIFO, fragments) ------------------------------------------

CONFIGS = [
    ("alias bomb", bomb(), ["anchors and aliases expand to more than 20000 nodes"]),
    ("recursive alias", "a: &a [*a]\n", ["anchors and aliases expand to more than"]),
    ("nested brackets", "Global: " + "[" * 5000 + "\n", [":1: nested more than 32 levels deep"]),
    ("nested mappings", "".join(" " * i + f"k{i}:\n" for i in range(200)), ["nested more than 32 levels deep"]),
    ("second Train block", "Train:\n  epochs_iters: 1\nGlobal:\n  seed: 1\nTrain:\n  batch_size: 3\n",
     [":5: duplicate key 'Train' (first on line 1)"]),
    ("duplicate key", "Global:\n  seed: 1\n  model: LeNet\n  seed: 2\n",
     [":4: duplicate key 'seed' (first on line 2)"]),
    ("empty file", "", ["is empty; put at least a Global: section in it"]),
    ("only comments", "# Global:\n#   seed: 1\n", ["is empty"]),
    ("top level a list", "- Global\n- Train\n", ["top level must be a mapping of sections", "got a list"]),
    ("top level a string", "just words\n", ["top level must be a mapping", "got a str"]),
    ("two documents", "Global: {}\n---\nTrain: {}\n", ["malformed YAML", "but found another document"]),
    ("too large", "# " + "x" * (1 << 20) + "\nGlobal: {}\n", ["bytes, more than the 1048576 allowed"]),
    ("not UTF-8", "Global:\n  model: LeNet\n  output: \xff\n", [":3: not UTF-8 text (byte 0xff)"]),
    ("a FIFO", None, ["is not a regular file"]),
]


@pytest.mark.parametrize("name, text, fragments", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_bad_config_file(name, text, fragments, tmp_path, out):
    path = tmp_path / "cfg.yaml"
    if text is None:
        os.mkfifo(path)
    else:
        path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    before = snapshot(out)
    done, elapsed = run_cli(tmp_path, path, f"Global.output={out}", f"Global.dataset_dir={DIGITS}")
    assert_one_line(done, elapsed, *fragments)
    assert snapshot(out) == before


# --- Global.output and sizes: (id, overrides, fragments, processes) ---------------------------------------

def output_cases(tmp: Path) -> dict:
    (tmp / "a_file").write_text("not a folder\n")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    return {"file": tmp / "a_file", "dangling": tmp / "dangling", "under_file": tmp / "a_file" / "out"}


OUTPUTS = [
    ("output is a file", ["Global.output={file}"], ["exists and is not a folder"]),
    ("output is a dangling link", ["Global.output={dangling}"], ["is a symbolic link to", "which does not exist"]),
    ("output under a file", ["Global.output={under_file}"], ["is a file, so no folder can be made under it"]),
    ("output under /proc", ["Global.output=/proc/paddledist-out"], ["is under /proc, a kernel file system"]),
    ("output on a read-only mount", ["Global.output={ro}/out"], ["is on a read-only file system"]),
    ("output without room", ["Global.output={small}/out"], ["free, the checkpoints of this run need about"]),
    ("seed negative", ["Global.seed=-1"], ["Global.seed must be >= 0, got -1"]),
    ("seed huge", ["Global.seed=123456789012345678901234567890"], ["Global.seed must be <= 2147483647"]),
    ("input_size huge", ["Train.input_size=100000"], ["Train.input_size must be <= 1024"]),
    ("synthetic too large", ["Global.dataset_dir=synthetic:100000000"], ["give between 1 and 200000 synthetic"]),
    ("deep -o value", ["Train.dist_ips=" + "[" * 3000], ["-o value:1: nested more than 32 levels"]),
]


@pytest.fixture
def mounts(tmp_path):
    """A read-only tmpfs and a 300 KB one (root: these tests run as root, like the rest of the suite)."""
    made = []
    for name, opts in (("ro", "ro,size=1m"), ("small", "size=300k")):
        (tmp_path / name).mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(tmp_path / name)], check=True)
        made.append(tmp_path / name)
    yield {p.name: p for p in made}
    for p in made:
        subprocess.run(["umount", "-l", str(p)], check=False)


@pytest.mark.parametrize("processes, dry_run", [(1, False), (2, False), (2, True)], ids=["1", "2", "2-dry"])
@pytest.mark.parametrize("name, overrides, fragments", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_bad_output_or_size(name, overrides, fragments, processes, dry_run, tmp_path, out, mounts):
    fill = {k: str(v) for k, v in {**output_cases(tmp_path), **mounts}.items()}
    args = [o.format(**fill) for o in overrides]
    if not any(a.startswith("Global.output=") for a in args):
        args.append(f"Global.output={out}")  # the huge seed once overwrote this folder's config.yaml and logs
    before = snapshot(out)
    done, elapsed = run_cli(tmp_path, CONFIG, f"Global.dataset_dir={DIGITS}", *args,
                            *(["Global.device=cpu:0,1"] if processes == 2 else []), dry_run=dry_run)
    assert_one_line(done, elapsed, *fragments)
    assert snapshot(out) == before
    assert not (tmp_path / "a_file").is_dir()


def test_empty_output_string(tmp_path, out):
    path = tmp_path / "cfg.yaml"
    path.write_text(f'Global:\n  output: ""\n  dataset_dir: {DIGITS}\n')
    done, elapsed = run_cli(tmp_path, path, dry_run=True)
    assert_one_line(done, elapsed, "Global.output is empty")


# --- list files: (id, change to the dataset copy, fragments) ----------------------------------------------

def _edit_list(root: Path, line: int, text: bytes) -> None:
    rows = (root / "train.txt").read_bytes().split(b"\n")
    rows[line - 1] = text
    (root / "train.txt").write_bytes(b"\n".join(rows))


def _fifo_image(root: Path) -> None:
    rel = (root / "train.txt").read_text().split("\n")[4].split()[0]
    os.remove(root / rel)
    os.mkfifo(root / rel)


LISTS = [
    ("list not UTF-8", lambda r: _edit_list(r, 3, b"images/\xe9t\xe9.png 1"), ["train.txt:3: not UTF-8 text"]),
    ("label superscript", lambda r: _edit_list(r, 2, "images/0001.png \u00b2".encode()),
     ["train.txt:2: label '\u00b2' is not an integer of at most 9 digits"]),
    ("label 20 digits", lambda r: _edit_list(r, 2, b"images/0001.png 12345678901234567890"),
     ["train.txt:2: label '12345678901234567890' is not an integer"]),
    ("path climbs out", lambda r: _edit_list(r, 6, b"../../etc/passwd 1"),
     ["train.txt:6: '../../etc/passwd' is outside the dataset folder", "Global.allow_outside_paths=true"]),
    ("absolute path", lambda r: _edit_list(r, 6, b"/etc/hostname 1"), ["train.txt:6: '/etc/hostname' is outside"]),
    ("listed image is a FIFO", _fifo_image, ["train.txt:5", "is not a regular file (a FIFO"]),
    ("images folder unreadable", lambda r: os.chmod(r / "images", 0), ["cannot reach", "Permission denied",
                                                                        "check the permissions of"]),
    ("label file huge id", lambda r: (r / "label.txt").write_text("0 zero\n999999999 many\n"),
     ["label.txt:2: class id 999999999 is past the 1048576 classes allowed"]),
]


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("name, change, fragments", LISTS, ids=[c[0] for c in LISTS])
def test_bad_list(name, change, fragments, processes, tmp_path, out, data):
    change(data)
    before = snapshot(out)
    try:
        done, elapsed = run_cli(tmp_path, CONFIG, f"Global.dataset_dir={data}", f"Global.output={out}",
                                "Train.epochs_iters=1", *(["Global.device=cpu:0,1"] if processes == 2 else []),
                                prefix=NO_DAC)
    finally:
        os.chmod(data / "images", 0o755)
    assert_one_line(done, elapsed, *fragments)
    assert snapshot(out) == before


def test_outside_paths_are_read_when_allowed(tmp_path, data):
    """The documented key lets a list point elsewhere (here: an absolute path to the same images)."""
    _edit_list(data, 6, f"{data / 'images' / '0001.png'} 1".encode())
    done, _ = run_cli(tmp_path, CONFIG, f"Global.dataset_dir={data}", f"Global.output={tmp_path / 'o'}",
                      "Global.allow_outside_paths=true", dry_run=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.unit
@pytest.mark.parametrize("text, progress", [
    ('{"epoch": 2, "step_in_epoch": 5}', {"epoch": 2, "step_in_epoch": 5}),
    ("[" * 100_000 + "]" * 100_000, None),  # json.load: RecursionError
    ('{"epoch": 1, "epoch": 9}', None),
    ("[1, 2]", None),
    ("\xff", None),
    (None, None),
], ids=["valid", "deep", "duplicate-key", "not-a-mapping", "not-json", "absent"])
def test_the_latest_progress_read_by_the_supervisor_is_bounded(tmp_path, text, progress):
    """The restart loop reads <output>/latest/latest.info.json: a damaged or crafted file means no progress known,
    never a crash of the supervisor (the bounded JSON reader of every file the tool reads)."""
    from paddledist.runfiles.latest import latest_progress

    if text is not None:
        (tmp_path / "latest").mkdir()
        (tmp_path / "latest" / "latest.info.json").write_bytes(text.encode("latin-1"))
    assert latest_progress(str(tmp_path)) == progress

"""A full disk while writing a checkpoint or result (issue 20): small tmpfs mounts as Global.output, through the
real CLI. One line naming the path, the space needed and free; no partial files left; the previous `latest`
byte-for-byte unchanged; a non-zero exit that is not 2; with 2 processes both ranks stop; on two network-
namespace hosts "No space left" is printed on both. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.common import unavailable
from helpers.netns import netns_hosts  # noqa: F401  (fixture)

from paddledist.errors import OUTPUT_ERROR_EXIT, OutputWriteError
from paddledist.fsio import atomic_write

REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / "tools" / "train.py")
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DATA = str(REPO / "dataset" / "digits")


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs folder of that size, unmounted at the end."""
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def argv(output: Path, *extra: str) -> list[str]:
    return [sys.executable, MAIN, "-c", CONFIG, "-o", f"Global.output={output}", f"Global.dataset_dir={DATA}",
            "Train.save_interval=1", "Train.uniform_output_enabled=false", *extra]


def train(output: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(argv(output, *extra), capture_output=True, text=True, timeout=timeout)


def fill(fs: Path, leave: int) -> None:
    """A ballast file that leaves `leave` bytes free on the file system of `fs`."""
    st = os.statvfs(fs)
    with open(fs / "ballast", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(1, st.f_bavail * st.f_frsize - leave))


def train_then_fill(output: Path, fs: Path, leave: int, *extra: str,
                    timeout: float = 240) -> subprocess.CompletedProcess:
    """The disk fills during the run: the start-up check sees room for every checkpoint (it refuses a disk that is
    already too small), then, at the first logged step, a ballast file leaves only `leave` bytes free. Small
    batches make the first epoch last seconds, far longer than the fill takes."""
    proc = subprocess.Popen(argv(output, "Train.batch_size=8", "Train.log_interval=5", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, filled = [], None
    for line in proc.stdout:
        lines.append(line)
        if " iter " in line:
            fill(fs, leave)
            filled = time.monotonic()
            break
    out, err = proc.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err)
    done.seconds_after_fill = time.monotonic() - filled if filled else None
    return done


def one_error_line(stderr: str) -> str:
    """The one `paddledist: error:` line of a run that stopped on a full disk, with no traceback."""
    errors = [line for line in stderr.splitlines() if "paddledist: error:" in line]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert "No space left on device" in errors[0] and "free there" in errors[0], errors[0]
    return errors[0]


def no_partial_files(output: Path) -> bool:
    return not [p for p in output.rglob("*") if ".tmp-" in p.name or ".link-" in p.name or ".old-" in p.name]


@pytest.mark.multiproc
def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_no_temp(tmpfs):
    fs = tmpfs("64k")
    target = fs / "train_result.json"
    atomic_write(str(target), "old")
    with pytest.raises(OutputWriteError, match=r"cannot write .*train_result\.json: No space left on device "
                                               r"\(needs about 1\.0 MB, .* free there\)"):
        atomic_write(str(target), b"x" * (1 << 20))
    assert target.read_text() == "old" and sorted(os.listdir(fs)) == ["train_result.json"]


@pytest.mark.multiproc
def test_first_checkpoint_on_a_300k_disk_is_one_line_exit_3_and_nothing_partial(tmpfs):
    fs = tmpfs("16m")
    out = fs / "out"
    proc = train_then_fill(out, fs, 300 << 10, "Train.epochs_iters=1")
    assert proc.returncode == OUTPUT_ERROR_EXIT != 2, proc.stderr[-2000:]
    one_error_line(proc.stderr)
    assert proc.seconds_after_fill < 15 and no_partial_files(out)
    assert not (out / "latest").exists() and not os.listdir(out / ".checkpoints")


@pytest.mark.multiproc
def test_a_full_disk_leaves_the_previous_run_s_checkpoints_byte_for_byte(tmpfs):
    """A finished run's latest, best_model, epoch_1 and results, then the same output resumed on a disk that
    fills before the first new checkpoint: everything the first run wrote is as it was (files rewritten at
    start with the same content, config.yaml and logs aside)."""
    from helpers.files import snapshot

    fs = tmpfs("16m")
    out = fs / "out"
    first = train(out, "Train.epochs_iters=1")
    assert first.returncode == 0, first.stderr[-3000:]
    before = snapshot(out)
    proc = train_then_fill(out, fs, 300 << 10, "Train.epochs_iters=2", "Train.resume_path=auto")
    assert proc.returncode == OUTPUT_ERROR_EXIT, proc.stderr[-2000:]
    one_error_line(proc.stderr)
    assert proc.seconds_after_fill < 15 and no_partial_files(out)
    after = snapshot(out)
    rewritten = ("config.yaml", "label_dict.txt")
    kept = {p: v for p, v in before.items() if not p.startswith(("logs",) + rewritten) and v[0] != "dir"}
    assert kept and {p: after.get(p) for p in kept} == kept  # folders aside: their mtime moves with a temp entry
    assert after["label_dict.txt"][:2] == before["label_dict.txt"][:2]  # rewritten with the same content


@pytest.mark.multiproc
def test_two_processes_on_a_1200k_disk_keep_latest_and_stop_together(tmpfs):
    fs = tmpfs("16m")
    out = fs / "out"
    proc = train_then_fill(out, fs, 1200 << 10, "Train.epochs_iters=3", "Global.device=cpu:0,1")
    text = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 2), text[-3000:]
    one_error_line(proc.stderr)
    assert "failed with exit code 3" in proc.stderr and proc.seconds_after_fill < 15
    assert no_partial_files(out) and (out / "latest" / "latest.pdparams").is_file()
    # Once there is room again, the latest checkpoint that survived loads and the job finishes from it.
    (fs / "ballast").unlink()
    again = train(out, "Train.epochs_iters=3", "Global.device=cpu:0,1",
                  f"Train.resume_path={out}/latest/latest.pdparams")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resum" in again.stdout + again.stderr and no_partial_files(out)


@pytest.mark.multihost
def test_a_full_disk_on_the_first_host_is_named_on_both_hosts(tmpfs, netns_hosts, tmp_path):  # noqa: F811
    """Machines with their own disks: the first host's Global.output fills to 1.2 MB free. Both hosts stop,
    neither with 0 or 2, and both print "No space left" (the second one hears it from the first)."""
    from helpers.failures import command, output, start, wait_all

    hosts = netns_hosts(2)
    for i in range(2):
        (tmp_path / f"host{i}").mkdir()
    full = tmpfs("16m")
    os.symlink(full, tmp_path / "host0" / "out")
    procs = start(hosts, tmp_path, "full", command(hosts, "Train.save_interval=1", "Train.epochs_iters=3",
                                                   "Train.uniform_output_enabled=false", "Train.batch_size=8",
                                                   "Train.log_interval=5"))
    deadline = time.monotonic() + 120  # the disk fills once training runs (the start-up check saw room)
    while " iter " not in output(tmp_path, "full", 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    fill(full, 1200 << 10)
    done = wait_all(procs, timeout=240)
    assert all(code not in (0, 2) and seconds < 15 for code, seconds in done.values()), done
    for i in range(2):
        text = output(tmp_path, "full", i)
        assert "No space left on device" in text and "Traceback" not in text, text[-3000:]
    assert (full / "latest" / "latest.pdparams").is_file() and no_partial_files(full)

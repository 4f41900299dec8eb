"""Chaos: one training job on N network-namespace hosts (paddledist.testing.netns) takes a seeded sequence of
faults, one after another (each once the previous one recovered), and must still end with the parameters of an
uninterrupted run of the same config.

    python benchmarks/chaos.py --hosts 3 --faults 10 --seed 1

LeNet on dataset/digits (Train.augment=false, batch 8 a rank, every step logged), Train.max_restarts >= faults,
Train.resume_path=auto, heartbeats every 1 s lost after 10 s, Train.stall_timeout=10, a latest every epoch. The
faults (KINDS): a rank SIGKILLed (worker); everything on a non-first host killed and its command run again once the
others noticed (supervisor); a rank SIGSTOPped past Train.stall_timeout (stop); a host's link cut for 5 s, below
Train.heartbeat_timeout, where no restart may happen (blip); a link cut past it, then healed (cut); a non-first
host's Global.output (a 16 MB tmpfs) filled until its next checkpoint fails, then freed as a user would (disk).
Each fault waits for the first host's train log to pass a seeded step. Everything is read from the job's own
signals: detection is the first host's supervisor printing "paddledist: restart N/M after: ...", recovery the
first step line the train log writes after it (for a blip: after the link is back), steps redone the last step
logged before detection minus the step training continued from. Needs root (namespaces, mount).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from paddledist.testing.netns import NetnsHosts

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "tools" / "train.py")
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DATA = REPO / "dataset" / "digits"
KINDS = ("worker", "supervisor", "stop", "blip", "cut", "disk")
ON_LATER_HOSTS = ("supervisor", "disk")  # the first host runs rank 0 and holds the results (Global.output)
BATCH = 8
HEARTBEAT_TIMEOUT = 10
STALL_TIMEOUT = 10
BLIP_S = 5
CUT_S = HEARTBEAT_TIMEOUT + 5
STEP = re.compile(r"epoch (\d+)/\d+ iter (\d+)/(\d+)")
RESTART = "paddledist: restart "


@dataclass
class Fault:
    kind: str
    host: int
    step: int
    row: dict = field(default_factory=dict)


def steps_per_epoch(hosts: int) -> int:
    images = sum(1 for line in (DATA / "train.txt").read_text().splitlines() if line.strip())
    return math.ceil(images / (BATCH * hosts))


def plan(hosts: int, faults: int, seed: int) -> tuple[list[Fault], int]:
    """The seeded faults (every kind once before any repeats, in a shuffled order) at increasing global steps,
    half an epoch to an epoch apart, and the epochs the job needs to take them all."""
    rng, per_epoch = random.Random(seed), steps_per_epoch(hosts)
    kinds: list[str] = []
    while len(kinds) < faults:
        kinds += rng.sample(KINDS, len(KINDS))
    out, step = [], 0
    for kind in kinds[:faults]:
        step += rng.randint(per_epoch // 2, per_epoch)
        host = rng.randrange(1, hosts) if kind in ON_LATER_HOSTS else rng.randrange(hosts)
        out.append(Fault(kind, host, step))
    return out, step // per_epoch + 2


def command(addresses, epochs: int, output: str = "out") -> list[str]:
    return [sys.executable, TRAIN, "-c", CONFIG, "-o", f"Train.dist_ips={','.join(addresses)}",
            f"Global.output={output}", f"Global.dataset_dir={DATA}", f"Train.epochs_iters={epochs}",
            f"Train.batch_size={BATCH}", "Train.log_interval=1", "Train.augment=False", "Train.save_interval=1",
            "Train.peer_timeout=90", "Train.uniform_output_enabled=False", "Train.resume_path=auto",
            f"Train.max_restarts={epochs * 4}", "Train.heartbeat_interval=1",
            f"Train.heartbeat_timeout={HEARTBEAT_TIMEOUT}", f"Train.stall_timeout={STALL_TIMEOUT}"]


class Job:
    """The job on `hosts`, each host in root/host<i> (its command's output in root/<run>.host<i>[.<n>].txt)."""

    def __init__(self, hosts: NetnsHosts, root: Path, run: str, argv: list[str], output: str = "out") -> None:
        self.hosts, self.root, self.run, self.argv = hosts, root, run, argv
        self.log = root / "host0" / output / "logs" / "train.rank0.log"
        self.result = root / "host0" / output / "train_result.json"
        self.procs: dict[int, subprocess.Popen] = {}
        self.outputs: dict[int, Path] = {}
        self.pending: list[tuple[float, Callable[[], None]]] = []  # (when, what): a link to heal
        for i in range(hosts.count):
            self.start(i)

    def start(self, i: int) -> None:
        home = self.root / f"host{i}"
        home.mkdir(exist_ok=True)
        again = sum(1 for p in self.root.glob(f"{self.run}.host{i}*.txt"))
        self.outputs[i] = self.root / f"{self.run}.host{i}{f'.{again}' if again else ''}.txt"
        with open(self.outputs[i], "w") as out:
            self.procs[i] = self.hosts.popen(i, self.argv, cwd=str(home), stdout=out, stderr=subprocess.STDOUT)

    def text(self, i: int = 0) -> str:
        return self.outputs[i].read_text(errors="replace")

    def restarts(self) -> int:
        return self.text(0).count(RESTART)

    def steps(self, since: int = 0) -> list[int]:
        """Global steps the first host's train log wrote from byte `since` on, in order."""
        try:
            text = self.log.read_bytes()[since:].decode(errors="replace")
        except FileNotFoundError:
            return []
        return [(int(e) - 1) * int(n) + int(i) for e, i, n in STEP.findall(text)]

    def size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def wait(self, what: str, until: Callable[[], object], timeout: float):
        """Poll `until` (running due heals meanwhile) until it is true; a host that ended fails it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for when, heal in list(self.pending):
                if time.monotonic() >= when:
                    self.pending.remove((when, heal))
                    heal()
            got = until()
            if got:
                return got
            ended = {i: p.returncode for i, p in self.procs.items() if p.poll() is not None}
            if ended:
                raise RuntimeError(f"waiting for {what}: host(s) ended {ended}\n{self.text(0)[-3000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"{what}: not within {timeout:.0f}s\n{self.text(0)[-3000:]}")

    def finish(self, timeout: float) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        return {i: p.returncode for i, p in self.procs.items()}


def pids(hosts: NetnsHosts, i: int) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", hosts.namespaces[i]], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


def ranks(hosts: NetnsHosts, i: int) -> list[int]:
    """The rank processes on host i (paddle's launcher runs paddledist/worker.py with the rank variables)."""
    out = []
    for pid in pids(hosts, i):
        try:
            if b"PADDLE_TRAINER_ID=" in Path(f"/proc/{pid}/environ").read_bytes() and \
                    b"worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def link(hosts: NetnsHosts, i: int, state: str) -> None:
    subprocess.run(["ip", "link", "set", f"{hosts.tag}h{i}", state], check=True)


def fill(folder: Path, leave: int = 64 << 10) -> None:
    """A ballast file that leaves `leave` bytes free where `folder` is: the host's next checkpoint fails."""
    st = os.statvfs(folder)
    with open(folder / "ballast", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(1, st.f_bavail * st.f_frsize - leave))


def inject(job: Job, fault: Fault) -> Optional[Callable[[], None]]:
    """Cause `fault`; what to do once it is detected (run a command again, free a disk), if anything."""
    hosts, i = job.hosts, fault.host
    if fault.kind in ("worker", "stop"):
        rank = job.wait(f"a rank on host {i}", lambda: ranks(hosts, i), 60)[0]
        os.kill(rank, signal.SIGKILL if fault.kind == "worker" else signal.SIGSTOP)
    elif fault.kind == "supervisor":
        for pid in pids(hosts, i):
            os.kill(pid, signal.SIGKILL)
        job.procs.pop(i).wait(timeout=10)  # not a host that ended by itself
        return lambda: job.start(i)
    elif fault.kind in ("blip", "cut"):
        link(hosts, i, "down")
        job.pending.append((time.monotonic() + (BLIP_S if fault.kind == "blip" else CUT_S),
                            lambda: link(hosts, i, "up")))
    elif fault.kind == "disk":
        folder = (job.root / f"host{i}" / "out").resolve()
        fill(folder)
        return lambda: (folder / "ballast").unlink()
    return None


def take(job: Job, fault: Fault) -> dict:
    """Wait for the fault's step, cause it, and measure detection, recovery and the steps done again."""
    job.wait(f"step {fault.step}", lambda: max(job.steps() or [0]) >= fault.step, 300)
    restarts, start = job.restarts(), time.monotonic()
    after = inject(job, fault)
    row = {"kind": fault.kind, "host": fault.host, "step": max(job.steps())}
    if fault.kind == "blip":
        job.wait("the link back", lambda: not job.pending, 60)
        healed, at = time.monotonic(), job.size()
        job.wait("a step after the blip", lambda: job.steps(at), 120)
        if job.restarts() != restarts:
            raise RuntimeError(f"a {BLIP_S} s link cut caused a restart:\n{job.text(0)[-3000:]}")
        return {**row, "detected_s": None, "recovered_s": round(time.monotonic() - healed, 1), "redone": 0}
    job.wait(f"{fault.kind} detected", lambda: job.restarts() > restarts, 180)
    row["detected_s"], at = round(time.monotonic() - start, 1), job.size()
    row["cause"] = job.text(0).split(RESTART)[-1].split("\n")[0].split(": ", 1)[-1].split("; relaunching")[0]
    last = max(job.steps())
    if after:
        after()
    first = job.wait("a step after the restart", lambda: job.steps(at), 300)[0]
    row["recovered_s"] = round(time.monotonic() - start, 1)
    job.wait("the link back", lambda: not job.pending, 60)
    return {**row, "redone": last - (first - 1)}


def reference(hosts: NetnsHosts, root: Path, epochs: int) -> tuple[Path, float]:
    """The uninterrupted run of the same command: its final parameters and its wall time."""
    start = time.monotonic()
    job = Job(hosts, root, "reference", command(hosts.addresses, epochs, "ref"), "ref")
    codes = job.finish(timeout=600)
    if any(codes.values()):
        raise RuntimeError(f"the uninterrupted run failed {codes}:\n{job.text(0)[-3000:]}")
    return root / "host0" / "ref" / "latest" / "latest.pdparams", time.monotonic() - start


def max_difference(a: Path, b: Path) -> float:
    import paddle

    x, y = paddle.load(str(a), return_numpy=True), paddle.load(str(b), return_numpy=True)
    assert set(x) == set(y), (sorted(x), sorted(y))
    return max(float(abs(x[k] - y[k]).max()) for k in x)


def mount_disks(hosts: NetnsHosts, root: Path) -> list[Path]:
    """Every non-first host's Global.output is a 16 MB tmpfs (root/disk<i>, linked as root/host<i>/out)."""
    mounted = []
    for i in range(1, hosts.count):
        disk, home = root / f"disk{i}", root / f"host{i}"
        disk.mkdir()
        home.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
        mounted.append(disk)
        os.symlink(disk, home / "out")
    return mounted


def chaos(hosts_count: int, faults: int, seed: int, root: Path, say=print) -> dict:
    """The whole benchmark in `root`: the reference run, then the job with its faults; the measured rows."""
    planned, epochs = plan(hosts_count, faults, seed)
    with NetnsHosts(hosts_count) as hosts:
        ref, ref_s = reference(hosts, root, epochs)
        say(f"uninterrupted: {epochs} epochs of {steps_per_epoch(hosts_count)} steps in {ref_s:.0f}s")
        mounted = mount_disks(hosts, root)
        try:
            start = time.monotonic()
            job = Job(hosts, root, "chaos", command(hosts.addresses, epochs))
            rows = []
            for fault in planned:
                rows.append(take(job, fault))
                say(format_row(rows[-1]))
            codes = job.finish(timeout=600)
            wall = time.monotonic() - start
        finally:
            for disk in mounted:
                subprocess.run(["umount", "-l", str(disk)], check=False)
    result = json.loads(job.result.read_text())
    return {"hosts": hosts_count, "seed": seed, "epochs": epochs, "uninterrupted_s": round(ref_s, 1),
            "chaos_s": round(wall, 1), "exit_codes": codes, "done_flag": result["done_flag"],
            "restarts": len(result["restarts"]), "restarts_expected": sum(f.kind != "blip" for f in planned),
            "faults": rows,
            "max_abs_difference": max_difference(ref, job.root / "host0" / "out" / "latest" / "latest.pdparams")}


def format_row(row: dict) -> str:
    detected = "-" if row["detected_s"] is None else f"{row['detected_s']}s"
    return (f"{row['kind']:<10} host {row['host']}  at step {row['step']:<4} detected after {detected:<6} "
            f"recovered after {row['recovered_s']}s  steps redone {row['redone']}")


def short(cause: str) -> str:
    """A restart's cause without its paths and explanations, for a table."""
    full = "No space left on device" in cause
    cause = cause.split(": cannot write")[0] + (": No space left on device" if full else "")
    for tail in (" (Train.heartbeat_timeout", " (log:", ", pid"):
        cause = cause.split(tail)[0]
    return cause


def markdown(got: dict) -> str:
    """The per-fault table as docs/benchmarks.md shows it."""
    lines = ["| # | fault | host | at step | detected after (s) | recovered after (s) | steps redone | cause (the "
             "first host's supervisor) |", "|---|---|---|---|---|---|---|---|"]
    for n, row in enumerate(got["faults"], 1):
        detected = "-" if row["detected_s"] is None else row["detected_s"]
        lines.append(f"| {n} | {row['kind']} | {row['host']} | {row['step']} | {detected} | {row['recovered_s']} | "
                     f"{row['redone']} | {short(row['cause']) if 'cause' in row else '(no restart)'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    parser.add_argument("--keep", help="run in this folder (kept) instead of a temporary one")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="chaos"))
    root.mkdir(parents=True, exist_ok=True)
    got = chaos(args.hosts, args.faults, args.seed, root)
    equal = got["max_abs_difference"] <= 1e-5
    print(f"exit codes {got['exit_codes']}, done_flag {got['done_flag']}, {got['restarts']} restart(s) in "
          f"train_result.json ({got['restarts_expected']} expected: one per fault but the blips), "
          f"{got['chaos_s']}s (uninterrupted {got['uninterrupted_s']}s)")
    print(f"final parameters equal to the uninterrupted run's: {'yes' if equal else 'NO'} "
          f"(max abs difference {got['max_abs_difference']:.2e})")
    if args.markdown:
        print(markdown(got))
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=1) + "\n")
    ok = equal and got["done_flag"] and got["restarts"] == got["restarts_expected"]
    sys.exit(0 if ok and not any(got["exit_codes"].values()) else 1)


if __name__ == "__main__":
    main()

"""The scaling benchmark's process handling: start and time runs, start-up overhead, free ports, and the CPU
share other processes take meanwhile."""

from __future__ import annotations

import json
import os
import resource
import socket
import statistics
import subprocess
import time
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The checkout the benchmark runs from (every run starts there)."""


def start(argv: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise SystemExit(f"timed out after {timeout} s: {' '.join(proc.args)}\n{out[-3000:]}")
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(proc.args)}\n{out[-3000:]}")
    return out


def run(argv: list[str], env: dict, timeout: float) -> str:
    return finish(start(argv, env), timeout)


def last_json(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no JSON line in the output:\n{out[-3000:]}")


def time_to_line(argv: list[str], env: dict, path: str, marker: str, timeout: float) -> float:
    """Seconds until `marker` appears in the file at `path`; the command then runs to its end."""
    t0 = time.time()
    proc = subprocess.Popen(argv, env={**env, "BENCH_T0": repr(t0)}, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    seen = None
    while seen is None and proc.poll() is None and time.time() - t0 < timeout:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if marker in f.read():
                    seen = time.time() - t0
        except OSError:
            pass
        time.sleep(0.02)
    proc.wait(timeout=timeout)
    if seen is None or proc.returncode != 0:
        raise SystemExit(f"no {marker!r} in {path} (exit {proc.returncode}): {' '.join(argv)}")
    return round(seen, 2)


def startup_overhead(runs: dict[str, list[tuple[float, bool]]]) -> Optional[dict]:
    """Median start-up of each side and their difference, over runs of one kind: without paddle's 3 s store
    retry where both sides have such runs, else over runs that both hit it; None when the sides share no kind
    (a retried launch against a clean one would show a 3 s difference that is paddle's race, not overhead)."""
    for retried in (False, True):
        use = {k: [t for t, r in v if r == retried] for k, v in runs.items()}
        if use["bare"] and use["pd"]:
            bare, pd = statistics.median(use["bare"]), statistics.median(use["pd"])
            return {"bare_launch_s": round(bare, 2), "paddledist_s": round(pd, 2), "overhead_s": round(pd - bare, 2),
                    "compared": "runs with the store retry" if retried else "runs without the store retry"}
    return None


def store_retried(log_dir: str) -> bool:
    """Whether a rank retried its connection to paddle's TCP store (a 3 s sleep) in this launch's worker logs."""
    for root, _, files in os.walk(log_dir):
        for name in files:
            if name.startswith("workerlog."):
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                    if "Retry to connect" in f.read():
                        return True
    return False


def free_port_range(span: int = 17) -> int:
    """A base port with base..base+span free now (paddledist's own default may be taken by another job)."""
    for base in range(23000, 40000, 97):
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise SystemExit("no free port range found")


def cpu_snapshot() -> Optional[tuple[int, int, float]]:
    """(busy jiffies, all jiffies) of the machine and the CPU seconds of finished children."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + fields[4]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(fields) - idle, sum(fields), usage.ru_utime + usage.ru_stime


def foreign_share(before, after) -> Optional[float]:
    """Share of the machine's CPU time used by processes other than the measured ones."""
    if before is None or after is None or after[1] == before[1]:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy, total, ours = after[0] - before[0], after[1] - before[1], (after[2] - before[2]) * hz
    return max(0.0, (busy - ours) / total)


def wait_quiet(limit_s: float, idle_share: float = 0.9) -> None:
    """Wait (up to limit_s) until the machine is at least idle_share idle over a 2 s window."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        a = cpu_snapshot()
        time.sleep(2)
        b = cpu_snapshot()
        if a is None or b[1] == a[1] or 1 - (b[0] - a[0]) / (b[1] - a[1]) >= idle_share:
            return

"""scaling.py --hosts 2 --link-mbit M: the same measurements across network-namespace hosts on a shaped link.

Two namespace "hosts" (paddledist.testing.netns: veth pairs on a private bridge) whose eth0 sends at most M Mbit/s
(tc's token bucket, `tbf`, on each host's egress, so each direction of the link has rate M). Both hosts share
this machine's cores, one rank each:
  (a) one process (the bare loop) on host 0
  (b) one bare process per host at once, no communication: the ceiling
  (c) paddledist data parallel, one rank per host (Train.dist_ips = both hosts), `-o` overrides from the
      command line
  (d) a bare paddle.distributed.launch + fleet loop, one rank per host, on the same link
The kernel here has no netem, so no latency is added: the link's round trip is measured (ping) and reported.
The transport's own cost is measured too: the same bytes a rank sends per step, exchanged both ways at once over
plain sockets between the hosts (paddledist.testing.sockbench); `transport_bound` = compute / (compute + that CPU
cost) is the most any data parallel can reach over this kernel's TCP, `link_bound` what the link's rate allows;
`transport_bound_with_softirq` adds the kernel's receive work (softirq) that the exchange's processes are not
charged for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

from bench_base import Bench
from bench_procs import ROOT, finish, free_port_range, last_json
from bench_report import table

from paddledist.testing.netns import NetnsHosts  # the namespace hosts the multi-host tests use too

SOCKBENCH = [sys.executable, "-m", "paddledist.testing.sockbench"]
"""The plain-socket probes (sink, source, echo, ping, exchange), a module run inside each host."""


def shape(hosts: NetnsHosts, mbit: float) -> None:
    """Each host's egress limited to `mbit`: the token bucket holds 2 ms of traffic (at least 64 KiB, one GSO
    packet), enough to reach the rate between timer ticks without long bursts above it."""
    burst = max(64 << 10, int(mbit * 1e6 / 8 * 0.002))
    for i in range(hosts.count):
        done = hosts.run(i, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{mbit:g}mbit",
                             "burst", str(burst), "latency", "50ms"])
        if done.returncode != 0:
            raise SystemExit(f"tc could not shape host {i}'s link: {done.stderr.strip()}")


def link_mbit(hosts: NetnsHosts) -> float:
    """Mbit/s of one TCP stream from host 0 to host 1 over 1.5 s."""
    port = free_port_range(1)
    sink = hosts.popen(1, [*SOCKBENCH, "sink", str(port)], stdout=subprocess.PIPE, text=True)
    sink.stdout.readline()
    hosts.run(0, [*SOCKBENCH, "source", hosts.addresses[1], str(port), "1.5"], timeout=30)
    return round(float(sink.communicate(timeout=30)[0].strip()), 1)


def rtt_ms(hosts: NetnsHosts) -> float:
    """Median round trip of a 1-byte TCP message (no ping here): what a collective's handshake waits."""
    port = free_port_range(1)
    echo = hosts.popen(1, [*SOCKBENCH, "echo", str(port)], stdout=subprocess.PIPE, text=True)
    echo.stdout.readline()
    out = hosts.run(0, [*SOCKBENCH, "ping", hosts.addresses[1], str(port)], timeout=30).stdout
    echo.wait(timeout=30)
    return float(out.strip())


def transport_cost(hosts: NetnsHosts, nbytes: int, rounds: int = 6) -> dict:
    """One step's exchange over plain sockets between hosts 0 and 1 (each sends and receives `nbytes` at once):
    the larger CPU seconds and wall seconds per round of the two hosts (sockbench's exchange), and the kernel's
    softirq seconds per round and host (the veth and TCP receive work no process is charged for, from
    /proc/stat: machine-wide, so measured on an otherwise idle machine)."""
    port = free_port_range(1)
    args = ["exchange", "--bytes", str(nbytes), "--rounds", str(rounds)]
    listener = hosts.popen(1, [*SOCKBENCH, *args, "--listen", str(port)], stdout=subprocess.PIPE, text=True)
    listener.stdout.readline()
    softirq = softirq_s()
    near = hosts.run(0, [*SOCKBENCH, *args, "--connect", hosts.addresses[1], str(port)], timeout=300)
    softirq = (softirq_s() - softirq) / rounds / 2
    far = json.loads(listener.communicate(timeout=60)[0].strip().splitlines()[-1])
    here = json.loads(near.stdout.strip().splitlines()[-1])
    return {"cpu_s": max(here["cpu_s"], far["cpu_s"]), "wall_s": max(here["wall_s"], far["wall_s"]),
            "softirq_s": round(softirq, 5)}


def softirq_s() -> float:
    """Seconds all cores have spent in softirq since boot (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as f:
        return int(f.readline().split()[7]) / os.sysconf("SC_CLK_TCK")


def tx_bytes(hosts: NetnsHosts, host: int) -> int:
    with open(f"/sys/class/net/{hosts.tag}h{host}/statistics/rx_bytes") as f:  # the bridge side receives
        return int(f.read())                                                  # what the host's eth0 sends


def override(overrides, key: str, default: str) -> str:
    found = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return found[-1] if found else default


class HostBench(Bench):
    """Bench's measurements with every process inside a namespace host: one rank per host."""

    def __init__(self, args, hosts: NetnsHosts) -> None:
        super().__init__(args)
        self.hosts = hosts
        self.log_text = ""
        """Rank 0's log of the last data-parallel run (the sync it chose, the gradient size)."""
        self.tx: list[float] = []
        """Bytes host 0 sent per training step in each data-parallel run."""
        self.comm: list[float] = []
        """Per data-parallel run: the median share of a step rank 0's log gives the exchange after backward
        (the part of the communication that backward did not hide), epochs after the first."""

    def _start(self, host: int, argv: list[str], env: dict) -> subprocess.Popen:
        return self.hosts.popen(host, argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def single(self, env: dict, data: str) -> float:
        proc = self._start(0, [sys.executable, os.path.join(ROOT, "benchmarks", "bare_fleet.py"),
                               *self.bare_args(data, self.args.steps)], env)
        return last_json(finish(proc, self.args.timeout))["images_per_sec"]

    def ceiling(self, data: str, env: Optional[dict] = None) -> float:
        bare = [sys.executable, os.path.join(ROOT, "benchmarks", "bare_fleet.py"),
                *self.bare_args(data, self.args.steps)]
        procs = [self._start(i, bare, env or self.tuned()) for i in range(self.hosts.count)]
        rates = [last_json(finish(p, self.args.timeout))["images_per_sec"] for p in procs]
        self.bound = len(rates) * min(rates)
        return sum(rates)

    def bare_launch(self, env: dict, data: str, steps: Optional[int] = None) -> dict:
        port, logs = free_port_range(), tempfile.mkdtemp(dir=self.tmp)
        procs = []
        for i, host in enumerate(self.hosts.addresses):
            argv = [sys.executable, "-m", "paddle.distributed.launch", "--ips", ",".join(self.hosts.addresses),
                    "--start_port", str(port), "--host", host, "--nproc_per_node", "1",
                    "--log_dir", os.path.join(logs, str(i)), os.path.join(ROOT, "benchmarks", "bare_fleet.py"),
                    *self.bare_args(data, steps or self.args.steps)]
            # gloo would advertise the address the host name resolves to (127.0.0.1 here): a user of the bare
            # launcher names the interface, as paddledist's launcher does for its jobs
            procs.append(self._start(i, argv, {**env, "BENCH_T0": repr(time.time()), "GLOO_SOCKET_IFNAME": "eth0"}))
        outs = [finish(p, self.args.timeout) for p in procs]
        return last_json(outs[0])

    def paddledist(self, data: str, overrides=(), env: Optional[dict] = None, epochs: Optional[int] = None) -> float:
        a, port = self.args, free_port_range()
        outs = [tempfile.mkdtemp(dir=self.tmp) for _ in self.hosts.addresses]
        extra = [*self.pd_settings(), *a.overrides, *overrides, f"Train.dist_ips={','.join(self.hosts.addresses)}",
                 f"Train.port={port}", "Global.device=cpu"]
        before = tx_bytes(self.hosts, 0)
        procs = [self._start(i, self.train_argv(data, out, epochs or a.epochs, extra), env or self.plain)
                 for i, out in enumerate(outs)]
        for p in procs:
            finish(p, a.timeout)
        self.tx.append((tx_bytes(self.hosts, 0) - before) / ((epochs or a.epochs) * a.epoch_steps))
        with open(os.path.join(outs[0], "train_result.json"), encoding="utf-8") as f:
            history = json.load(f)["history"]
        with open(os.path.join(outs[0], "logs", "train.rank0.log"), encoding="utf-8") as f:
            self.log_text = f.read()
        shares = [int(c) for e, c in re.findall(r"epoch (\d+)/\d+ iter .* comm (\d+)%", self.log_text) if e != "1"]
        if shares:
            self.comm.append(statistics.median(shares) / 100)
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)
        return statistics.mean(h["images_per_sec"] for h in history[1:])


def main_hosts(args) -> None:
    started = time.time()
    print(f"{args.model}, batch {args.batch_size} per rank, {args.hosts} namespace hosts x 1 rank, link "
          f"{args.link_mbit:g} Mbit/s, overrides {args.overrides}; load {os.getloadavg()}", flush=True)
    b, summary = run_hosts(args)
    summary["elapsed_s"] = round(time.time() - started)
    print()
    print(table(b.rows))
    print(json.dumps(summary))


def run_hosts(args) -> tuple[HostBench, dict]:
    """The --hosts measurements; (bench, summary)."""
    with NetnsHosts(args.hosts) as hosts:
        shape(hosts, args.link_mbit)
        measured, rtt = link_mbit(hosts), rtt_ms(hosts)
        print(f"link: {args.link_mbit:g} Mbit/s asked, {measured} Mbit/s measured (one TCP stream), round trip "
              f"{rtt} ms; load {os.getloadavg()}", flush=True)
        b = HostBench(args, hosts)
        try:
            rows = collect_rows(b)
            summary = summarize(b, rows, measured, rtt)
            summary.update(transport_summary(summary, transport_cost(hosts, summary["bytes_per_step"])))
        finally:
            shutil.rmtree(b.tmp, ignore_errors=True)
    return b, summary


def transport_summary(summary: dict, cost: dict) -> dict:
    """How far the run is from what the wire allows: `transport_bound` = compute / (compute + the CPU the
    kernel's TCP copies of one step's exchange cost a host's processes), and the efficiency against it;
    `transport_bound_with_softirq` counts the kernel's receive work that no process is charged for too."""
    bound = summary["compute_s"] / (summary["compute_s"] + cost["cpu_s"])
    with_softirq = summary["compute_s"] / (summary["compute_s"] + cost["cpu_s"] + cost["softirq_s"])
    return {"transport_cpu_s": cost["cpu_s"], "transport_softirq_s": cost["softirq_s"],
            "transport_wall_s": cost["wall_s"], "transport_bound": round(bound, 3),
            "efficiency_vs_transport_bound": round(summary["efficiency"] / bound, 3),
            "transport_bound_with_softirq": round(with_softirq, 3),
            "efficiency_vs_transport_bound_with_softirq": round(summary["efficiency"] / with_softirq, 3),
            "dp_over_bare_launch": round(summary["dp_images_per_sec"] / summary["bare_images_per_sec"], 3)}


def collect_rows(b: HostBench) -> dict:
    n = b.hosts.count
    rows = {"one": b.measure("(a) 1 process", "synthetic", lambda: b.single(b.tuned(), "synthetic"), 1, procs=1)}
    rows["ceiling"], rows["dp"], rows["ratios"] = b.paired(
        (f"(b) {n} independent processes, one per host (ceiling)", f"(c) paddledist, {n} hosts x 1 rank"),
        "synthetic", (lambda: b.ceiling("synthetic"), lambda: b.paddledist("synthetic")), b.args.pairs)
    rows["bare"] = b.measure(f"(d) bare launch + fleet, {n} hosts x 1 rank", "synthetic",
                             lambda: b.bare_launch(b.tuned(), "synthetic")["images_per_sec"], 1)
    return rows


def summarize(b: HostBench, rows: dict, measured: float, rtt: Optional[float]) -> dict:
    a = b.args
    found = re.search(r"gradient sync: (\w+) .*?, ([\d.]+) MB of gradients", b.log_text)
    sync, grad_mb = (found.group(1), float(found.group(2))) if found else ("?", 0.0)
    compressed = override(a.overrides, "Train.grad_compression", "none") not in ("none", "null")
    wire = 0.5 if sync == "bucket" and compressed else 1.0
    accum = int(override(a.overrides, "Train.accum_steps", "1"))
    world = b.hosts.count
    bytes_per_step = grad_mb * 1e6 * wire * 2 * (world - 1) / world / accum  # what each rank sends (ring)
    compute_s = a.batch_size / (rows["ceiling"].median / world)  # one bare step, no communication
    comm_s = bytes_per_step * 8 / (a.link_mbit * 1e6)
    raw = max(rows["one"].median, rows["bare"].median)
    return {
        "model": a.model, "batch_per_rank": a.batch_size, "hosts": world, "ranks": world,
        "overrides": list(a.overrides), "grad_sync": sync,
        "efficiency": round(statistics.median(rows["ratios"]), 3), "efficiency_pairs": rows["ratios"],
        "dp_images_per_sec": rows["dp"].median, "ceiling_images_per_sec": rows["ceiling"].median,
        "raw_paddle_images_per_sec": raw, "one_images_per_sec": rows["one"].median,
        "bare_images_per_sec": rows["bare"].median, "dp_over_raw_paddle": round(rows["dp"].median / raw, 3),
        "link_mbit": a.link_mbit, "link_measured_mbit": measured, "rtt_ms": rtt,
        "bytes_per_step": round(bytes_per_step), "tx_bytes_per_step_measured": round(statistics.median(b.tx)),
        "dp_comm_share": round(statistics.median(b.comm), 3) if b.comm else None,
        "compute_s": round(compute_s, 4), "comm_s": round(comm_s, 4),
        "link_bound": round(compute_s / max(compute_s, comm_s), 3),
        "foreign_load_max": round(max(max(r.foreign) for r in b.rows), 2), "load": os.getloadavg(),
    }

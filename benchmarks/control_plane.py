"""The control plane at scale, simulated on this machine: N node supervisors (the real paddledist.cluster code:
preflight and hello checks, heartbeats, the loss and stop relays, all-done; no paddle, no workers) on loopback
addresses 127.0.x.y, node 0 (the hub) alone in its own process (paddledist.testing.controlplane).

    python benchmarks/control_plane.py --nodes 2,16,128,1024,4096

Per N, three jobs (each joins first): (1) join_s, the hub's CPU (cores, its process's user+system time over
--window seconds at the default heartbeat interval) and RSS, then detect_s (one node killed: until every other
node holds a verdict naming it); (2) stop_s (one node's ranks fail: until every other node holds the verdict its
runner stops on); (3) all_done_s. One JSON line per N; the last line is the largest N again.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Optional

import psutil

from paddledist.cluster.auth import new_secret
from paddledist.testing.controlplane import Simulation


def hub_usage(sim: Simulation, window_s: float) -> tuple[float, float]:
    """The hub process's CPU (cores) over `window_s` of steady heartbeats, and its RSS in MB."""
    hub = psutil.Process(sim.hub_pid)
    before, start = hub.cpu_times(), time.monotonic()
    time.sleep(window_s)
    after, wall = hub.cpu_times(), time.monotonic() - start
    cpu = (after.user + after.system - before.user - before.system) / wall
    return cpu, hub.memory_info().rss / 2**20


def measure(nnodes: int, window_s: float, secret: Optional[bytes] = None) -> dict:
    """Every figure for one N; each job's nodes are fresh processes."""
    row: dict = {"nodes": nnodes, "secret": secret is not None}
    with Simulation(nnodes, secret=secret) as sim:
        joins = [sim.join()]
        row["hub_cpu"], row["hub_rss_mb"] = hub_usage(sim, window_s)
        lost = sim.detect(nnodes - 1)
    with Simulation(nnodes, secret=secret) as sim:
        joins.append(sim.join())
        stopped = sim.stop(nnodes - 1)
    with Simulation(nnodes, secret=secret) as sim:
        joins.append(sim.join())
        row["all_done_s"] = sim.all_done()
    for what, got in (("detect", lost), ("stop", stopped)):
        if got["named"] != got["others"]:
            raise RuntimeError(f"{nnodes} nodes, {what}: only {got['named']} of {got['others']} named the node: "
                               f"{got['unnamed']}")
        row[f"{what}_s"] = got["s"]
    row["join_s"], row["joins_s"] = max(joins), joins
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def plot(rows: list[dict], path: str) -> None:
    """Each time and the hub's CPU against N, log-log (matplotlib, needed only for --plot)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (times, cpu) = plt.subplots(1, 2, figsize=(10, 4))
    nodes = [r["nodes"] for r in rows]
    for key in ("join_s", "detect_s", "stop_s", "all_done_s"):
        times.loglog(nodes, [max(r[key], 1e-4) for r in rows], marker="o", label=key)
    times.set(xlabel="simulated nodes", ylabel="seconds", title="control plane times")
    times.legend()
    cpu.loglog(nodes, [max(r["hub_cpu"], 1e-4) for r in rows], marker="o", label="hub CPU (cores)")
    cpu.axhline(0.1, linestyle="--", color="gray", label="target at 1024: 0.1")
    cpu.set(xlabel="simulated nodes", ylabel="cores", title="hub CPU at the default 5 s interval")
    cpu.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,16,128,1024,4096", help="node counts, comma-separated")
    parser.add_argument("--window", type=float, default=10.0, help="seconds over which the hub's CPU is read")
    parser.add_argument("--plot", help="also write a PNG of the figures here (needs matplotlib)")
    parser.add_argument("--secret", action="store_true", help="with a job secret: every hello challenged, every "
                        "message sealed with an HMAC (cluster/auth.py)")
    args = parser.parse_args()
    secret = new_secret().encode() if args.secret else None
    rows = []
    for n in args.nodes.split(","):
        rows.append(measure(int(n), args.window, secret))
        print(json.dumps(rows[-1]), flush=True)
    if args.plot:
        plot(rows, args.plot)
    print(json.dumps(max(rows, key=lambda r: r["nodes"])), flush=True)


if __name__ == "__main__":
    main()

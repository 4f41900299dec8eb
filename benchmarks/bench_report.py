"""The scaling benchmark's results: one Row per measurement, the table and the plot."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Row:
    name: str
    data: str
    values: list = field(default_factory=list)
    foreign: list = field(default_factory=list)
    bounds: list = field(default_factory=list)
    """Ceiling runs: N x the slowest process's images/s, the most any synchronous data parallel could make."""

    @property
    def median(self) -> Optional[float]:
        return round(statistics.median(self.values), 1) if self.values else None


def table(rows: list[Row]) -> str:
    lines = [f"| {'measurement':<52} | {'data':<9} | {'images/s':>9} | {'runs':<24} | foreign |",
             f"|{'-' * 54}|{'-' * 11}|{'-' * 11}|{'-' * 26}|---------|"]
    for r in rows:
        runs = ", ".join(f"{v:.0f}" for v in r.values)
        lines.append(f"| {r.name:<52} | {r.data:<9} | {r.median:>9} | {runs:<24} | {max(r.foreign) * 100:>6.0f}% |")
    return "\n".join(lines)


def plot(rows: list[Row], path: str, title: str) -> Optional[str]:
    """A bar chart of the medians (matplotlib, an optional dependency: skipped when missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", flush=True)
        return None
    labels = [f"{r.name} [{r.data}]" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.2))
    colors = ["#4c72b0" if "paddledist" in r.name else "#c44e52" if "ceiling" in r.name else "#999999" for r in rows]
    ax.barh(labels[::-1], [r.median for r in rows][::-1], color=colors[::-1])
    for i, r in enumerate(rows[::-1]):
        ax.text(r.median, i, f" {r.median:.0f}", va="center", fontsize=8)
    ax.set_xlabel("images/s (median)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path

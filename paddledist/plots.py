"""Every picture paddledist draws, with matplotlib (headless Agg backend) to PNG bytes: the run report's curves,
per-machine rates, confusion matrix and per-class accuracy, and check_dataset's class histogram."""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # no display on training machines; set before pyplot is imported

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

DPI = 100


def png(figure) -> bytes:
    """The figure as PNG bytes (and closed: a long job draws many)."""
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=DPI)
    plt.close(figure)
    return buffer.getvalue()


def curves(series: dict[str, tuple[Sequence, Sequence]], title: str) -> bytes:
    """One small panel per named series (x values, y values), side by side in rows of two."""
    rows = -(-len(series) // 2)
    figure, axes = plt.subplots(rows, 2, figsize=(10, 3.2 * rows), squeeze=False)
    for ax, (name, (x, y)) in zip(axes.flat, series.items()):
        ax.plot(x, y, marker="o", markersize=3)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(series):]:
        ax.axis("off")
    figure.suptitle(title)
    return png(figure)


def lines(x: Sequence, named: dict[str, Sequence], title: str, ylabel: str) -> bytes:
    """Several lines on one axis (e.g. each machine's images/s per epoch)."""
    figure, ax = plt.subplots(figsize=(10, 3.5))
    for name, y in named.items():
        ax.plot(x, y, marker="o", markersize=3, label=name)
    ax.set(title=title, xlabel="epoch", ylabel=ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return png(figure)


def bars(names: Sequence[str], groups: dict[str, Sequence[float]], title: str, ylabel: str) -> bytes:
    """Grouped bars: one group per name, one bar per entry of `groups` (e.g. train and val per class)."""
    x = np.arange(len(names))
    width = 0.8 / max(len(groups), 1)
    figure, ax = plt.subplots(figsize=(min(16, max(6, 0.35 * len(names) + 2)), 3.8))
    for k, (label, values) in enumerate(groups.items()):
        ax.bar(x + (k - (len(groups) - 1) / 2) * width, values, width, label=label)
    step = max(1, len(names) // 40)  # at most ~40 tick labels
    ax.set_xticks(x[::step], [str(n) for n in names][::step], rotation=90 if len(names) > 12 else 0)
    ax.set(title=title, ylabel=ylabel)
    ax.grid(axis="y", alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize="small")
    return png(figure)


def heatmap(matrix: np.ndarray, names: Sequence[str], title: str) -> bytes:
    """A confusion matrix: rows are true classes, columns predictions, each row's counts written in its cells."""
    size = min(12, max(4, 0.4 * len(names) + 2))
    figure, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(matrix, cmap="Blues")
    ticks = np.arange(len(names))
    ax.set_xticks(ticks, names, rotation=90)
    ax.set_yticks(ticks, names)
    ax.set(title=title, xlabel="predicted", ylabel="true")
    if len(names) <= 20:
        peak = matrix.max() or 1
        for (i, j), value in np.ndenumerate(matrix):
            if value:
                ax.text(j, i, str(int(value)), ha="center", va="center", fontsize=7,
                        color="white" if value > peak / 2 else "black")
    figure.colorbar(image, ax=ax, fraction=0.046)
    return png(figure)

"""The class histogram check_dataset writes, drawn with matplotlib as PaddleX draws it (paddledist/plots.py)."""

from __future__ import annotations

from paddledist.fsio import atomic_write


def class_counts(labels: list[int], num_classes: int) -> list[int]:
    """Samples per class id in [0, num_classes); ids outside are left out (check_dataset reports them)."""
    counts = [0] * num_classes
    for label in labels:
        if 0 <= label < num_classes:
            counts[label] += 1
    return counts


def draw(train: list[int], val: list[int], path: str) -> None:
    """A grouped bar chart (train and val per class id), written atomically as PNG."""
    from paddledist import plots  # matplotlib: only when a histogram is drawn

    image = plots.bars(list(range(len(train))), {"train": train, "val": val}, "samples per class (train / val)",
                       "samples")
    atomic_write(path, image)

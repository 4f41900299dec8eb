"""The class histogram check_dataset writes (PaddleX draws it with matplotlib; PIL is enough and always installed)."""

from __future__ import annotations


from PIL import Image, ImageDraw, ImageFont

from paddledist.fsio import atomic_path

TRAIN_COLOUR, VAL_COLOUR, INK = (66, 133, 244), (251, 140, 0), (60, 60, 60)
LEFT, RIGHT, TOP, BOTTOM, HEIGHT = 64, 24, 48, 44, 360


def class_counts(labels: list[int], num_classes: int) -> list[int]:
    """Samples per class id in [0, num_classes); ids outside are left out (check_dataset reports them)."""
    counts = [0] * num_classes
    for label in labels:
        if 0 <= label < num_classes:
            counts[label] += 1
    return counts


def draw(train: list[int], val: list[int], path: str) -> None:
    """A grouped bar chart (train and val per class id), written atomically as PNG."""
    n = max(len(train), 1)
    bar = max(2, min(20, 1200 // (2 * n)))
    step = 2 * bar + max(2, bar // 2)
    width = max(480, LEFT + n * step + RIGHT)
    image = Image.new("RGB", (width, HEIGHT), "white")
    d, font = ImageDraw.Draw(image), ImageFont.load_default()
    peak, base, plot_h = max(train + val + [1]), HEIGHT - BOTTOM, HEIGHT - BOTTOM - TOP
    d.text((LEFT, 10), "samples per class (train / val)", fill=INK, font=font)
    _legend(d, font, width)
    d.line([(LEFT, TOP), (LEFT, base), (width - RIGHT, base)], fill=INK)
    for value in (0, peak // 2, peak):
        y = base - round(value / peak * plot_h)
        d.line([(LEFT - 4, y), (LEFT, y)], fill=INK)
        d.text((4, y - 6), str(value), fill=INK, font=font)
    label_every = max(1, -(-28 // step))  # keep class-id labels about 28 px apart
    for i, (t, v) in enumerate(zip(train, val)):
        x = LEFT + 4 + i * step
        for k, (count, colour) in enumerate(((t, TRAIN_COLOUR), (v, VAL_COLOUR))):
            if count:
                d.rectangle([x + k * bar, base - round(count / peak * plot_h), x + (k + 1) * bar - 1, base - 1],
                            fill=colour)
        if i % label_every == 0:
            d.text((x, base + 6), str(i), fill=INK, font=font)
    d.text((LEFT, HEIGHT - 18), "class id", fill=INK, font=font)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG")


def _legend(d: ImageDraw.ImageDraw, font, width: int) -> None:
    x = width - RIGHT - 110
    for k, (name, colour) in enumerate((("train", TRAIN_COLOUR), ("val", VAL_COLOUR))):
        d.rectangle([x + k * 55, 12, x + k * 55 + 10, 22], fill=colour)
        d.text((x + k * 55 + 14, 10), name, fill=INK, font=font)

"""Build the bundled `dataset/digits` ClsDataset from scikit-learn's digits (offline; run once, output committed).

    python scripts/make_digits_dataset.py dataset/digits
"""

import os
import sys

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits


def main(out: str) -> None:
    digits = load_digits()
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    order = np.random.RandomState(0).permutation(len(digits.target))
    n_val = len(order) // 5
    lines = {"train": [], "val": []}
    for rank, i in enumerate(order):
        name = f"images/{i:04d}.png"
        pixels = (digits.images[i] * (255.0 / 16.0)).round().astype(np.uint8)
        Image.fromarray(pixels, mode="L").save(os.path.join(out, name), optimize=True)
        lines["val" if rank < n_val else "train"].append(f"{name} {digits.target[i]}")
    for split, rows in lines.items():
        with open(os.path.join(out, f"{split}.txt"), "w") as f:
            f.write("\n".join(sorted(rows)) + "\n")
    with open(os.path.join(out, "label.txt"), "w") as f:
        f.write("".join(f"{k} {k}\n" for k in range(10)))


if __name__ == "__main__":
    main(sys.argv[1])

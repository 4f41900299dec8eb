"""The same ResNet18 training step in PyTorch, for comparison only (torch is not a paddledist dependency).

    pip install torch            # CPU build
    python benchmarks/torch_resnet18.py --threads 1
    (python benchmarks/torch_resnet18.py --threads 1 & python benchmarks/torch_resnet18.py --threads 1; wait)

The model mirrors paddle.vision.models.resnet18 (7x7 stride-2 stem, max-pool, 4 stages of 2 basic blocks,
global average pool, linear head), 10 classes, 32x32 input, SGD with momentum; images/s after --warmup.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


def resnet18(classes: int = 10) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = resnet18()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x, y = torch.randn(args.batch_size, 3, 32, 32), torch.randint(0, 10, (args.batch_size,))
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    elapsed = time.perf_counter() - start
    print(json.dumps({"torch": torch.__version__, "threads": args.threads,
                      "images_per_sec": round(args.steps * args.batch_size / elapsed, 1)}), flush=True)


if __name__ == "__main__":
    main()

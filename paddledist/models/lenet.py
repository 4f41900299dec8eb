"""LeNet: a small batch-norm-free CNN for any square input size (so data parallel is exactly large-batch SGD)."""

import paddle.nn as nn


class LeNet(nn.Layer):
    def __init__(self, num_classes: int = 10, input_size: int = 32, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2D(2, 2),
            nn.Conv2D(6, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2D(2, 2),
        )
        side = input_size // 4
        self.fc = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * side * side, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x):
        return self.fc(self.features(x))


def lenet(num_classes: int = 10, input_size: int = 32) -> LeNet:
    return LeNet(num_classes, input_size)

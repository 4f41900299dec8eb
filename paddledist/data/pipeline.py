"""Dataset, transforms and loaders as the trainer sees them."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import paddle
import paddle.vision.transforms as T
from PIL import Image

from paddledist.data.formats import DecodeError, Samples
from paddledist.data.sharding import eval_shard, rank_batches

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
OK, PAD, BAD = 1, 0, -1


class Transform:
    """paddle's PIL transforms (resize; random crop with padding when augmenting), then CHW float32 normalised."""

    def __init__(self, input_size: int, train: bool, augment: bool) -> None:
        steps = [T.Resize((input_size, input_size), interpolation="bilinear")]  # as preprocess_spec records
        if train and augment:
            steps.append(T.RandomCrop(input_size, padding=max(1, input_size // 8)))
        self.pil = T.Compose(steps)
        self.input_size = input_size

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return normalise(np.asarray(self.pil(Image.fromarray(image))))


MEAN01, STD01 = tuple(m / 255 for m in MEAN), tuple(v / 255 for v in STD)
# PaddleX's NormalizeImage arithmetic, x * (scale / std) - mean / std, so that its predictor and ours compute
# bit for bit what evaluation computes from inference.yml's numbers
_ALPHA = np.asarray([(1 / 255) / v for v in STD01], np.float32)
_BETA = np.asarray([-m / v for m, v in zip(MEAN01, STD01)], np.float32)


def normalise(hwc: np.ndarray) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32 with ImageNet mean/std (the same arithmetic as exported models expect)."""
    return (hwc.astype(np.float32) * _ALPHA + _BETA).transpose(2, 0, 1)


def preprocess_spec(input_size: int) -> list[dict]:
    """Eval preprocessing as PaddleX's inference.yml `PreProcess.transform_ops`, exactly what Transform does at
    eval: PIL bilinear resize to S x S (the crop of S from S changes nothing; PaddleX's predictor expects one),
    (x / 255 - mean) / std per channel, HWC -> CHW."""
    return [
        {"ResizeImage": {"size": [input_size, input_size], "backend": "pil", "interpolation": "BILINEAR"}},
        {"CropImage": {"size": input_size}},
        {"NormalizeImage": {"mean": list(MEAN01), "std": list(STD01), "scale": 1 / 255,
                            "order": "", "channel_num": 3}},
        {"ToCHWImage": None},
    ]


class ImageDataset(paddle.io.Dataset):
    """Index i < len: sample i; i >= len: sample i - len as padding. Items: (image, label, status)."""

    def __init__(self, samples: Samples, transform: Transform) -> None:
        super().__init__()
        self.samples, self.transform = samples, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        n = len(self.samples)
        index, status = (i - n, PAD) if i >= n else (i, OK)
        try:
            image = self.transform(self.samples.read(index))
        except DecodeError:
            image, status = None, BAD
        if image is None:
            size = self.transform.input_size
            image = np.zeros((3, size, size), dtype=np.float32)
        return image, np.int64(self.samples.labels[index]), np.int64(status), np.int64(index)


class TrainBatchSampler(paddle.io.BatchSampler):
    """This rank's batches of one epoch (see sharding.rank_batches); call set_epoch before each epoch."""

    def __init__(self, n: int, batch_size: int, world_size: int, rank: int, seed: int) -> None:
        self.n, self.batch_size, self.world_size, self.rank, self.seed = n, batch_size, world_size, rank, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self):
        return rank_batches(self.n, self.batch_size, self.world_size, self.rank, self.seed, self.epoch)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches():
            yield [i if ok else i + self.n for i, ok in zip(batch.indices, batch.valid)]

    def __len__(self) -> int:
        return len(self.batches())


class EvalBatchSampler(paddle.io.BatchSampler):
    """Contiguous unpadded shard of the validation set; may be empty on some ranks."""

    def __init__(self, n: int, batch_size: int, world_size: int, rank: int) -> None:
        self.shard = list(eval_shard(n, world_size, rank))
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.shard), self.batch_size):
            yield self.shard[start:start + self.batch_size]

    def __len__(self) -> int:
        return -(-len(self.shard) // self.batch_size)


def make_loader(dataset: ImageDataset, batch_sampler: paddle.io.BatchSampler, num_workers: int) -> paddle.io.DataLoader:
    return paddle.io.DataLoader(dataset, batch_sampler=batch_sampler, num_workers=num_workers,
                                use_shared_memory=num_workers > 0, persistent_workers=num_workers > 0)

"""Dataset, transforms and loaders as the trainer sees them."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import paddle
import paddle.vision.transforms as T
from PIL import Image

from paddledist.data.formats import DecodeError, Samples
from paddledist.data.sharding import eval_shard, rank_batches

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
OK, PAD, BAD = 1, 0, -1


class Transform:
    """paddle's PIL transforms, then CHW float32 normalised.

    Eval: the short side resized to `resize_short` and centre-cropped to `input_size` (PaddleClas's ResizeImage
    + CropImage); with resize_short == input_size (LeNet) the image is resized to the square instead. Training
    with augmentation: `random_resized_crop` (+ horizontal flip, PaddleClas's RandCropImage + RandFlipImage) or
    `pad_crop` (resize to the square, pad by 1/8, random crop); without augmentation as eval."""

    def __init__(self, input_size: int, train: bool, augment: bool, resize_short: int | None = None,
                 interpolation: str = "bilinear", mean: tuple = IMAGENET_MEAN, std: tuple = IMAGENET_STD,
                 train_crop: str = "pad_crop") -> None:
        resize_short = resize_short or input_size
        if train and augment and train_crop == "random_resized_crop":
            steps = [T.RandomResizedCrop(input_size, interpolation=interpolation), T.RandomHorizontalFlip()]
        elif resize_short == input_size:
            steps = [T.Resize((input_size, input_size), interpolation=interpolation)]  # as preprocess_spec records
            if train and augment:
                steps.append(T.RandomCrop(input_size, padding=max(1, input_size // 8)))
        else:
            steps = [T.Resize(resize_short, interpolation=interpolation), T.CenterCrop(input_size)]
        self.pil = T.Compose(steps)
        self.input_size = input_size
        # the same float32 constants preprocess_spec writes for exported models
        self.mean = np.asarray([m * 255 for m in mean], np.float32)[:, None, None]
        self.std = np.asarray([v * 255 for v in std], np.float32)[:, None, None]

    @classmethod
    def of(cls, recipe, train: bool, augment: bool) -> "Transform":
        """The transform a model's recipe (paddledist.models.recipe) asks for."""
        return cls(recipe.input_size, train, augment, recipe.resize_short, recipe.interpolation, recipe.mean,
                   recipe.std, recipe.train_crop)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        chw = np.asarray(self.pil(Image.fromarray(image))).astype(np.float32).transpose(2, 0, 1)
        return (chw - self.mean) / self.std


def normalise(hwc: np.ndarray) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32 with ImageNet mean/std (the same arithmetic as exported models expect)."""
    chw = hwc.astype(np.float32).transpose(2, 0, 1)
    return (chw - np.asarray(MEAN, np.float32)[:, None, None]) / np.asarray(STD, np.float32)[:, None, None]


def preprocess_spec(input_size: int, resize_short: int | None = None, interpolation: str = "bilinear",
                    mean: tuple = IMAGENET_MEAN, std: tuple = IMAGENET_STD) -> dict:
    """Eval preprocessing as data, for exported models (inference.yml): `resize` to a square, or `resize_short`
    then a centre `crop`."""
    resize_short = resize_short or input_size
    size = ({"resize": [input_size, input_size]} if resize_short == input_size else
            {"resize_short": resize_short, "crop": [input_size, input_size]})
    return {**size, "interpolation": interpolation, "mean": [m * 255 for m in mean], "std": [v * 255 for v in std],
            "channel_order": "RGB", "layout": "CHW"}


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

"""Dataset, transforms and loaders as the trainer sees them."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import paddle
import paddle.vision.transforms as T
import paddle.vision.transforms.functional as F
from PIL import Image

from paddledist.data.formats import DecodeError, Samples
from paddledist.data.sharding import eval_shard, rank_batches

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
OK, PAD, BAD = 1, 0, -1


class Transform:
    """paddle's PIL transforms, then CHW float32 normalised with PaddleX's NormalizeImage arithmetic.

    Eval: the short side resized to `resize_short` and centre-cropped to `input_size` with PaddleClas's rounding
    (ResizeImage + CropImage, so PaddleX's predictor computes the same pixels from inference.yml); with
    resize_short == input_size (LeNet) the image is resized to the square instead. Training with augmentation:
    `random_resized_crop` (+ horizontal flip, PaddleClas's RandCropImage + RandFlipImage) or `pad_crop` (resize
    to the square, pad by 1/8, random crop); without augmentation as eval. Non-square inputs (`input_height`
    differs from `input_size`, the width) are resized to height x width, in training too, never cropped."""

    def __init__(self, input_size: int, train: bool, augment: bool, resize_short: int | None = None,
                 interpolation: str = "bilinear", mean: tuple = IMAGENET_MEAN, std: tuple = IMAGENET_STD,
                 train_crop: str = "pad_crop", input_height: int | None = None) -> None:
        resize_short = resize_short or input_size
        height = input_height or input_size
        if height != input_size:
            steps = [T.Resize((height, input_size), interpolation=interpolation)]
        elif train and augment and train_crop == "random_resized_crop":
            steps = [T.RandomResizedCrop(input_size, interpolation=interpolation), T.RandomHorizontalFlip()]
        elif resize_short == input_size:
            steps = [T.Resize((input_size, input_size), interpolation=interpolation)]  # as preprocess_spec records
            if train and augment:
                steps.append(T.RandomCrop(input_size, padding=max(1, input_size // 8)))
        else:
            steps = [ResizeShortCrop(resize_short, input_size, interpolation)]
        self.pil = T.Compose(steps)
        self.input_size = input_size
        self.shape = (3, height, input_size)
        self.alpha, self.beta = normalise_constants(mean, std)

    @classmethod
    def of(cls, recipe, train: bool, augment: bool) -> "Transform":
        """The transform a model's recipe (paddledist.models.recipe) asks for."""
        return cls(recipe.input_size, train, augment, recipe.resize_short, recipe.interpolation, recipe.mean,
                   recipe.std, recipe.train_crop, recipe.input_height)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        hwc = np.asarray(self.pil(Image.fromarray(image))).astype(np.float32)
        return (hwc * self.alpha + self.beta).transpose(2, 0, 1)


class ResizeShortCrop:
    """PaddleClas's eval ResizeImage(resize_short) + CropImage(size): sides round(side * short / min side), then
    the crop at ((h - size) // 2, (w - size) // 2); paddle's Resize(int) truncates and its CenterCrop rounds."""

    def __init__(self, short: int, size: int, interpolation: str) -> None:
        self.short, self.size, self.interpolation = short, size, interpolation

    def __call__(self, img: Image.Image) -> Image.Image:
        w, h = img.size
        scale = self.short / min(w, h)
        new_w, new_h = round(w * scale), round(h * scale)
        if (new_w, new_h) != (w, h):
            img = F.resize(img, (new_h, new_w), self.interpolation)
        return F.crop(img, (new_h - self.size) // 2, (new_w - self.size) // 2, self.size, self.size)


def normalise_constants(mean: tuple, std: tuple) -> tuple[np.ndarray, np.ndarray]:
    """PaddleX's NormalizeImage arithmetic, x * (scale / std) - mean / std (scale 1/255), as float32 constants,
    so that its predictor and ours compute bit for bit what evaluation computes from inference.yml's numbers."""
    alpha = np.asarray([(1 / 255) / v for v in std], np.float32)
    beta = np.asarray([-m / v for m, v in zip(mean, std)], np.float32)
    return alpha, beta


def preprocess_spec(input_size: int, resize_short: int | None = None, interpolation: str = "bilinear",
                    mean: tuple = IMAGENET_MEAN, std: tuple = IMAGENET_STD,
                    input_height: int | None = None) -> list[dict]:
    """Eval preprocessing as PaddleX's inference.yml `PreProcess.transform_ops`, exactly what Transform does at
    eval: PIL resize (to the square, or the short side, or [width, height] for non-square inputs) and the centre
    crop (a no-op after a square resize, kept as PaddleX's square models write it; none for non-square inputs,
    as PaddleX's text-line models write theirs), NormalizeImage, HWC -> CHW."""
    resize_short = resize_short or input_size
    height = input_height or input_size
    if height != input_size:
        resize, crop = {"size": [input_size, height]}, []
    else:
        resize = {"size": [input_size, input_size]} if resize_short == input_size else {"resize_short": resize_short}
        crop = [{"CropImage": {"size": input_size}}]
    return [
        {"ResizeImage": {**resize, "backend": "pil", "interpolation": interpolation.upper()}},
        *crop,
        {"NormalizeImage": {"mean": list(mean), "std": list(std), "scale": 1 / 255, "order": "", "channel_num": 3}},
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
            image = np.zeros(self.transform.shape, dtype=np.float32)
        return image, np.int64(self.samples.labels[index]), np.int64(status), np.int64(index)


class TrainBatchSampler(paddle.io.BatchSampler):
    """This rank's batches of one epoch (see sharding.rank_batches); call set_epoch before each epoch."""

    def __init__(self, n: int, batch_size: int, world_size: int, rank: int, seed: int) -> None:
        self.n, self.batch_size, self.world_size, self.rank, self.seed = n, batch_size, world_size, rank, seed
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """`skip`: batches of this epoch already trained (a resume mid-epoch); iteration starts after them,
        while batches() and len() still describe the whole epoch."""
        self.epoch, self.skip = epoch, skip

    def batches(self):
        return rank_batches(self.n, self.batch_size, self.world_size, self.rank, self.seed, self.epoch)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches()[self.skip:]:
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

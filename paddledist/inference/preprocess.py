"""inference.yml's PreProcess.transform_ops, run as PaddleX's image-classification predictor runs them."""

from __future__ import annotations

import numpy as np
from PIL import Image

from paddledist.errors import UserError

PIL_INTERPOLATION = {"NEAREST": Image.NEAREST, "LINEAR": Image.BILINEAR, "BILINEAR": Image.BILINEAR,
                     "BICUBIC": Image.BICUBIC, "BOX": Image.BOX, "LANCZOS4": Image.LANCZOS}
"""PaddleX's names for PIL's filters (its _PIL_INTERP_DICT)."""


def preprocess(image: np.ndarray, ops: list[dict]) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32 through inference.yml's transform_ops, read as PaddleX's predictor reads them."""
    for op in ops:
        (name, args), = op.items()
        image = TRANSFORM_OPS[name](image, **(args or {}))
    return image


def _resize(image: np.ndarray, size=None, resize_short=None, backend="cv2", interpolation="LINEAR") -> np.ndarray:
    height, width = image.shape[:2]
    if size is not None:
        width, height = (size, size) if isinstance(size, int) else size
    else:
        scale = resize_short / min(height, width)
        width, height = round(width * scale), round(height * scale)
    if backend != "pil":
        raise UserError(f"inference.yml: ResizeImage backend {backend!r} needs OpenCV; paddledist resizes with PIL "
                        "(backend: pil), as its own exports say")
    if (width, height) == image.shape[1::-1]:
        return image
    return np.asarray(Image.fromarray(image).resize((width, height), PIL_INTERPOLATION[interpolation.upper()]))


def _crop(image: np.ndarray, size=224) -> np.ndarray:
    width, height = (size, size) if isinstance(size, int) else size
    top, left = (image.shape[0] - height) // 2, (image.shape[1] - width) // 2
    if top < 0 or left < 0:
        raise UserError(f"inference.yml: CropImage size {size} is larger than the resized image {image.shape[:2]}")
    return image[top:top + height, left:left + width]


def _normalize(image: np.ndarray, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), scale=1 / 255,
               order="", channel_num=3) -> np.ndarray:
    # PaddleX's arithmetic: x * (scale / std) - mean / std, in float32
    alpha = np.asarray([scale / s for s in std], np.float32)
    beta = np.asarray([-m / s for m, s in zip(mean, std)], np.float32)
    return image.astype(np.float32) * alpha + beta


TRANSFORM_OPS = {"ResizeImage": _resize, "CropImage": _crop, "NormalizeImage": _normalize,
                 "ToCHWImage": lambda image: image.transpose(2, 0, 1)}
"""The transform_ops PaddleX's image-classification predictor knows, in the order it runs them."""

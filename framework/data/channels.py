"""Images of any channel count: 1-channel and N-channel inputs, 8- or 16-bit, from PNG/TIFF/.npy.

`ImageMaskFolder(channels=N)` reads its images with `read_channels_image` instead of as RGB:

* `.npy`: an H x W or H x W x C array;
* `.tif` / `.tiff`: every page of a multi-page file is a channel (a single page may itself hold
  channels);
* anything OpenCV reads (16-bit PNG included), unchanged: 1 channel, or colour converted from
  OpenCV's BGR(A) order to RGB(A).

8-bit images stay uint8; 16-bit ones become float32 divided by 257 and float arrays float32, so
every image is on the 0..255 scale the task's `mean`/`std` (0..1 scale, times 255) assume.
Give the task one mean and one std per channel (`task.mean: [0.5, 0.5, 0.5, 0.5]`).
"""

from __future__ import annotations

import cv2
import numpy as np

from framework.errors import DataError

SUFFIXES = (".png", ".tif", ".tiff", ".npy", ".jpg", ".jpeg", ".bmp")


def read_channels_image(path: str, channels: int) -> np.ndarray:
    """H x W x `channels` uint8 or float32 (0..255 scale); a DataError naming the file otherwise."""
    image = _read(path)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] != channels:
        raise DataError(f"{path}: expected {channels} channel(s), got an image of shape {image.shape}")
    scaled = on_pixel_scale(image)
    if scaled is None:
        raise DataError(f"{path}: unsupported pixel type {image.dtype} (8- or 16-bit integers or floats)")
    return scaled


def on_pixel_scale(image: np.ndarray) -> np.ndarray | None:
    """Pixels on the 0..255 scale the task's mean/std assume: uint8 as is, 16-bit divided by 257
    (65535 -> 255.0) and floats as float32; None for another type. The Python API reads arrays
    by this rule too (framework/api/batches.py)."""
    if image.dtype == np.uint8:
        return image
    if image.dtype == np.uint16:
        return (image / 257.0).astype(np.float32)
    if image.dtype.kind == "f":
        return image.astype(np.float32)
    return None


def _read(path: str) -> np.ndarray:
    lower = path.lower()
    if lower.endswith(".npy"):
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise DataError(f"{path}: cannot read array ({err})") from err
    if lower.endswith((".tif", ".tiff")):
        ok, pages = cv2.imreadmulti(path, flags=cv2.IMREAD_UNCHANGED)
        if not ok or not pages:
            raise DataError(f"{path}: cannot read TIFF")
        if len(pages) > 1:
            return np.stack(pages, axis=2)
        return _rgb_order(pages[0])
    image = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if image is None:
        raise DataError(f"{path}: cannot read image (missing, corrupt or not an image)")
    return _rgb_order(image)


def _rgb_order(image: np.ndarray) -> np.ndarray:
    if image.ndim == 3 and image.shape[2] == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if image.ndim == 3 and image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA)
    return image

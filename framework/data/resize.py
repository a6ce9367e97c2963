"""`Resize` as PIL resizes: images filtered on downscale, label maps on PIL NEAREST's grid.

Registered in TRANSFORMS under albumentations' name and in its place (framework/data/transforms.py),
with albumentations' keywords and one more, `antialias` (default true):

    - {type: Resize, height: 256, width: 512, interpolation: 2}   # PIL's BICUBIC images, PIL's NEAREST labels

antialias true: each image channel is resized by Pillow itself with the PIL filter that
`interpolation` names (0 NEAREST, 1 BILINEAR, 2 BICUBIC, 3 BOX, 4 LANCZOS; OpenCV's *_EXACT flags
as their plain ones). Pillow widens the filter by the scale on downscale (antialiasing), as
torchvision's Resize does on PIL images and as the official SPADE, OASIS, pix2pixHD and
pix2pix/CycleGAN loaders do. Masks (and `masks`, e.g. instance ids) with a nearest
`mask_interpolation` take the pixels PIL NEAREST takes, for any dtype; another
`mask_interpolation` filters them like images. antialias false: albumentations' Resize (OpenCV,
no filtering on downscale, nearest masks sampled at floor(i * scale): each new pixel's corner,
not its centre, half a new pixel off the image at 4x).
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
from PIL import Image

from framework.errors import ConfigError
from framework.registry import import_without


def import_albumentations():
    """albumentations without huggingface_hub, which only its pipeline sharing on the Hub uses
    (`import_without`). Imported on the first lookup of a transform or pipeline (transforms.py
    imports this module then), not with the framework (whose import sets NO_ALBUMENTATIONS_UPDATE,
    see framework/__init__.py)."""
    return import_without("albumentations", ("huggingface_hub",))


A = import_albumentations()

# albumentations' (OpenCV's) interpolation flag -> the PIL filter that antialias resizes with.
PIL_FILTERS = {
    cv2.INTER_NEAREST: Image.NEAREST, cv2.INTER_NEAREST_EXACT: Image.NEAREST,
    cv2.INTER_LINEAR: Image.BILINEAR, cv2.INTER_LINEAR_EXACT: Image.BILINEAR,
    cv2.INTER_CUBIC: Image.BICUBIC, cv2.INTER_AREA: Image.BOX, cv2.INTER_LANCZOS4: Image.LANCZOS,
}


class Resize(A.Resize):
    """albumentations' Resize with `antialias` (default true): PIL's resize (see the module)."""

    class InitSchema(A.Resize.InitSchema):
        antialias: Any  # checked in __init__, for a one-line error (pydantic's spans four)

    def __init__(self, height: int, width: int, interpolation: int = cv2.INTER_LINEAR,
                 mask_interpolation: int = cv2.INTER_NEAREST, area_for_downscale: Any = None,
                 antialias: bool = True, p: float = 1):
        if not isinstance(antialias, bool):
            raise ValueError(f"antialias: expected true or false, got {antialias!r}")
        super().__init__(height, width, interpolation=interpolation, mask_interpolation=mask_interpolation,
                         area_for_downscale=area_for_downscale, p=p)
        self.antialias = antialias

    def apply(self, img: np.ndarray, **params: Any) -> np.ndarray:
        if not self.antialias:
            return super().apply(img, **params)
        area = self.area_for_downscale in ("image", "image_mask")
        return resize_like_pil(img, self.height, self.width, self._filter(img, self.interpolation, area), "image")

    def apply_to_mask(self, mask: np.ndarray, **params: Any) -> np.ndarray:
        if not self.antialias:
            return super().apply_to_mask(mask, **params)
        area = self.area_for_downscale == "image_mask"
        return resize_like_pil(mask, self.height, self.width, self._filter(mask, self.mask_interpolation, area), "mask")

    def _filter(self, array: np.ndarray, interpolation: int, area_for_downscale: bool) -> int:
        """The PIL filter: `interpolation`'s, or BOX (area) where albumentations' area_for_downscale asks."""
        if area_for_downscale and (self.height < array.shape[0] or self.width < array.shape[1]):
            interpolation = cv2.INTER_AREA
        return PIL_FILTERS[interpolation]


def resize_like_pil(array: np.ndarray, height: int, width: int, pil_filter: int, what: str = "image") -> np.ndarray:
    """`array` (HxW or HxWxC) resized to height x width as Pillow's `Image.resize(..., pil_filter)` does."""
    if pil_filter == Image.NEAREST:  # a gather: exact for every dtype, no Pillow mode needed
        rows = pil_nearest_indices(array.shape[0], height)
        cols = pil_nearest_indices(array.shape[1], width)
        return np.take(np.take(array, rows, axis=0), cols, axis=1)
    if array.dtype not in (np.uint8, np.uint16, np.float32):
        raise ConfigError(f"Resize (antialias): the {what} is {array.dtype}; antialias resizes uint8, uint16 and "
                          "float32 arrays (convert it, or set antialias: false for OpenCV's resize)")
    size = (width, height)
    # Pillow itself (a torchvision dependency) rather than a reimplementation: its 8-bit path rounds
    # in fixed point after each pass, which only Pillow reproduces exactly. Its RGBA resize
    # premultiplies alpha, so channels other than an RGB triple go one band at a time, which gives
    # each band exactly what a multi-band resize gives it.
    if array.dtype == np.uint8 and array.ndim == 3 and array.shape[2] == 3:
        return np.asarray(Image.fromarray(np.ascontiguousarray(array)).resize(size, pil_filter))
    planes = array if array.ndim == 3 else array[:, :, None]
    out = np.empty((height, width, planes.shape[2]), dtype=array.dtype)
    for channel in range(planes.shape[2]):
        plane = np.ascontiguousarray(planes[:, :, channel])
        if array.dtype == np.uint16:  # resized as Pillow's 32-bit integer mode, then clipped back
            resized = np.asarray(Image.fromarray(plane.astype(np.int32)).resize(size, pil_filter))
            out[:, :, channel] = np.clip(resized, 0, np.iinfo(np.uint16).max)
        else:
            out[:, :, channel] = np.asarray(Image.fromarray(plane).resize(size, pil_filter))
    return out if array.ndim == 3 else out[:, :, 0]


def pil_nearest_indices(size_in: int, size_out: int) -> np.ndarray:
    """The source index PIL NEAREST takes for each output pixel: the pixel centre (i + 0.5) * scale,
    truncated. For 8- and 32-bit images (modes L, I, F: label maps, and 16-bit PNGs as Pillow
    before 10 opened them) Pillow steps from one centre to the next by adding the scale, and that
    running sum is what is summed here (np.add.accumulate adds in order). Computing each centre
    afresh took another pixel at 131 of 400 random size pairs, where a centre falls on a pixel
    border (e.g. 18.5 * 100/37 = 50); Pillow 13's 16-bit mode (I;16) does that, so on such a map it
    differs at those borders only (none at 2x or 4x). The running sum matched L and I at all sizes tried.
    """
    step = size_in / size_out
    steps = np.full(size_out, step)
    steps[0] = step * 0.5
    return np.minimum(np.add.accumulate(steps).astype(np.int64), size_in - 1)

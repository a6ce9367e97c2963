"""Datasets read from folders: any images/ + masks/ pair of folders, and the folder toolkit the
published layouts (framework/data/published/: VOC, Cityscapes, ADE20K, COCO-Stuff) share.

Folders, split files and image/mask pairing are checked when the dataset is built, so a wrong
path fails at startup naming the path, not hours later in a worker. Images are decoded with
OpenCV (faster than PIL for JPEG); masks hold class indices, either as palette PNGs or as
single-channel PNGs.
"""

from __future__ import annotations

import contextvars
import glob
import os
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps

from framework.data.base import SegmentationDataset
from framework.data.channels import SUFFIXES as ANY_CHANNEL_SUFFIXES
from framework.data.channels import read_channels_image
from framework.errors import DataError
from framework.registry import DATASETS

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
MAX_NAMES_IN_MESSAGE = 5


# Pillow modes whose RGB conversion keeps the picture (8 bits per channel): what the fallback reads
EIGHT_BIT_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr")
EXIF_ORIENTATION_TAG = 0x0112
ORIENTATIONS = {  # how the stored pixels are shown, for EXIF orientations 2-8
    2: "mirrored left to right", 3: "turned 180 degrees", 4: "mirrored top to bottom",
    5: "mirrored and turned 90 degrees", 6: "turned 90 degrees clockwise",
    7: "mirrored and turned 90 degrees", 8: "turned 90 degrees counter-clockwise",
}
TURNED_BY_90 = (5, 6, 7, 8)  # the orientations that swap height and width


def read_rgb_image(path: str) -> np.ndarray:
    """HxWx3 uint8 RGB, shown as its EXIF orientation says (as viewers and annotation tools show it).

    OpenCV decodes it (faster than Pillow for JPEG); a file OpenCV cannot decode is read with
    Pillow: OpenCV 5 refuses a TIFF whose orientation tag turns it by 90 degrees.
    """
    if not os.path.isfile(path):  # before OpenCV, which prints its own warning for a missing file
        raise DataError(f"{path}: cannot read image (missing, corrupt or not an image)")
    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is not None:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    try:
        with Image.open(path) as opened:
            if opened.mode not in EIGHT_BIT_MODES:
                raise DataError(f"{path}: cannot read image (OpenCV cannot decode it, and its Pillow mode "
                                f"{opened.mode} is not 8 bits per channel)")
            turned = opened.getexif().get(EXIF_ORIENTATION_TAG) in TURNED_BY_90
            if turned and opened.format == "TIFF" and opened.mode != "RGB":
                # Pillow 13 scrambles grey, RGBA and CMYK ones (checked against the stored pixels)
                raise DataError(f"{path}: cannot read image (OpenCV cannot decode a TIFF whose orientation tag "
                                f"turns it by 90 degrees, and Pillow misreads a {opened.mode} one); save it "
                                "turned and without the tag, or as RGB")
            return np.asarray(ImageOps.exif_transpose(opened).convert("RGB"))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise DataError(f"{path}: cannot read image (missing, corrupt or not an image)") from err


def exif_orientation(path: str) -> int:
    """The EXIF orientation (1-8) an image file carries; 1 (shown as stored) without one."""
    try:
        with Image.open(path) as opened:
            orientation = opened.getexif().get(EXIF_ORIENTATION_TAG, 1)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return 1
    return orientation if orientation in ORIENTATIONS else 1


def exif_size_hint(image_path: str, image_hw: tuple[int, int], mask_hw: tuple[int, int]) -> str:
    """Why a mask has its image's size turned by 90 degrees: the image was read turned by its
    EXIF orientation, and the mask was drawn on the stored pixels. "" for any other mismatch."""
    orientation = exif_orientation(image_path)
    if orientation not in TURNED_BY_90 or tuple(mask_hw) != tuple(image_hw)[::-1]:
        return ""
    return (f"; the image is stored {mask_hw[0]}x{mask_hw[1]} with EXIF orientation {orientation} "
            f"({ORIENTATIONS[orientation]} when shown) and is read as shown, as annotation tools show it, "
            "so the mask was drawn on the stored pixels: turn the mask the same way, or save the image "
            "without its orientation tag")


def read_index_mask(path: str) -> np.ndarray:
    """HxW class indices from a palette ("P") PNG or a single-channel PNG."""
    try:
        with Image.open(path) as mask:
            if mask.mode == "P":  # the pixel values are palette indices, i.e. the classes
                return np.asarray(mask)
    except OSError as err:  # UnidentifiedImageError included
        raise DataError(f"{path}: cannot read mask ({err})") from err
    mask = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if mask is None:
        raise DataError(f"{path}: cannot read mask")
    if mask.ndim != 2:
        raise DataError(
            f"{path}: mask has {mask.shape[2]} channels; masks must hold class indices, "
            "as a palette PNG or a single-channel PNG, not colours"
        )
    return mask


def require_dir(path: str) -> str:
    if not os.path.isdir(path):
        raise DataError(f"data folder not found: {path}")
    return path


def read_split_file(path: str) -> list[str]:
    """Sample names, one per line (the first word of each line, as VOC's files have)."""
    if not os.path.isfile(path):
        raise DataError(f"split file not found: {path}")
    with open(path) as f:
        names = [line.split()[0] for line in f if line.strip()]
    if not names:
        raise DataError(f"split file lists no samples: {path}")
    return names


def files_by_stem(folder: str, suffixes: Iterable[str]) -> dict[str, str]:
    """{stem: file name} of the files in `folder` ending in one of `suffixes` (case-insensitive).

    A suffix may be longer than an extension (`_mask.png`); the stem is what precedes it.
    """
    suffixes = tuple(s.lower() for s in suffixes)
    found: dict[str, str] = {}
    for entry in os.scandir(folder):
        suffix = next((s for s in suffixes if entry.name.lower().endswith(s)), None)
        if suffix is None or not entry.is_file():
            continue
        stem = entry.name[: -len(suffix)]
        if stem in found:
            problem = f"{folder}: both {found[stem]} and {entry.name} are named {stem}; keep one"
            collected = _DUPLICATES.get()
            if collected is None:
                raise DataError(problem)
            collected.append(problem)  # tools/check_dataset.py lists it with the other problems
            continue
        found[stem] = entry.name
    return found


# While set (by `duplicate_names_collected`), files_by_stem records duplicate names here and
# keeps the first file instead of refusing the folder.
_DUPLICATES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("duplicate_names", default=None)


@contextmanager
def duplicate_names_collected():
    """Within the block, datasets are built despite duplicate sample names; yields their list."""
    found: list[str] = []
    token = _DUPLICATES.set(found)
    try:
        yield found
    finally:
        _DUPLICATES.reset(token)


def require_all(names: Iterable[str], found: dict[str, str], what: str, folder: str) -> None:
    missing = [n for n in names if n not in found]
    if missing:
        shown = ", ".join(missing[:MAX_NAMES_IN_MESSAGE]) + (", ..." if len(missing) > MAX_NAMES_IN_MESSAGE else "")
        raise DataError(f"{folder}: no {what} for {len(missing)} sample(s): {shown}")


class _FolderDataset(SegmentationDataset):
    """Pairs of image and mask files; names and file names kept as numpy string arrays."""

    def _set_samples(self, names: list[str], image_files: list[str], mask_files: list[str]) -> None:
        # numpy string arrays, not lists of str: workers touching Python objects would copy them.
        self.names = np.array(names)
        self.image_files = np.array(image_files)
        self.mask_files = np.array(mask_files)

    def __len__(self) -> int:
        return len(self.names)

    def image_path(self, index: int) -> str:
        return os.path.join(self.image_dir, str(self.image_files[index]))

    def mask_path(self, index: int) -> str:
        return os.path.join(self.mask_dir, str(self.mask_files[index]))

    def read_image(self, index: int) -> np.ndarray:
        """Sample `index`'s image as training reads it (tools/check_dataset.py reads it here too)."""
        path = self.image_path(index)
        return read_rgb_image(path) if self.channels is None else read_channels_image(path, self.channels)

    def load_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        return self.read_image(index), read_index_mask(self.mask_path(index)), str(self.names[index])

    def size_mismatch_hint(self, index: int, image: np.ndarray, mask: np.ndarray) -> str:
        if self.channels is not None:  # read as stored (framework/data/channels.py): no orientation
            return ""
        return exif_size_hint(self.image_path(index), image.shape[:2], mask.shape)


@DATASETS.register()
class ImageMaskFolder(_FolderDataset):
    """root/<img_dir>/<name>.<jpg|png|...> paired with root/<mask_dir>/<name><mask_suffix>.

    Without `split_file` every image is a sample; with it (a path relative to root, or
    absolute), only the names it lists, one per line. `channels: N` reads N-channel images
    (16-bit PNG, multi-page TIFF, .npy; framework/data/channels.py) instead of RGB ones.
    """

    def __init__(
        self,
        root: str,
        classes: Sequence[str],
        img_dir: str = "images",
        mask_dir: str = "masks",
        img_suffix: str | None = None,
        mask_suffix: str = ".png",
        split_file: str | None = None,
        pipeline: Sequence = (),
        ignore_index: int = 255,
        palette: Sequence[Sequence[int]] | None = None,
        channels: int | None = None,
    ):
        super().__init__(pipeline=pipeline, classes=classes, ignore_index=ignore_index, palette=palette)
        if channels is not None and (isinstance(channels, bool) or not isinstance(channels, int) or channels < 1):
            raise ValueError(f"channels must be a positive integer (or null for RGB), got {channels!r}")
        self.channels = channels
        root = require_dir(os.path.expanduser(str(root)))
        self.image_dir = require_dir(os.path.join(root, img_dir))
        self.mask_dir = require_dir(os.path.join(root, mask_dir))
        suffixes = IMAGE_SUFFIXES if channels is None else ANY_CHANNEL_SUFFIXES
        images = files_by_stem(self.image_dir, suffixes if img_suffix is None else [img_suffix])
        masks = files_by_stem(self.mask_dir, [mask_suffix])
        if not images:
            raise DataError(f"{self.image_dir}: no images (looked for {img_suffix or ', '.join(suffixes)})")
        if split_file is None:
            names = sorted(images)
            require_all(sorted(masks), images, "image", self.image_dir)
        else:
            names = read_split_file(os.path.join(root, os.path.expanduser(split_file)))
            require_all(names, images, "image", self.image_dir)
        require_all(names, masks, f"mask ({mask_suffix})", self.mask_dir)
        self._set_samples(names, [images[n] for n in names], [masks[n] for n in names])


def list_inputs(specs: list[str]) -> list[Path]:
    """Image files named by each spec: a file, a folder (its images, sorted) or a glob pattern."""
    found: list[Path] = []
    for spec in specs:
        if os.path.isdir(spec):
            found += sorted(p for p in Path(spec).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        elif os.path.isfile(spec):
            found.append(Path(spec))
        else:
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True))
            if not matches:
                raise DataError(f"--input {spec}: no such file or folder, and no file matches it")
            found += [p for p in matches if p.suffix.lower() in IMAGE_SUFFIXES]
    if not found:
        raise DataError(f"--input {' '.join(specs)}: no images ({', '.join(IMAGE_SUFFIXES)})")
    return found

"""Image datasets for GANs: single images (unconditional) and input/target pairs (image-to-image).

A subclass implements `__len__` and one loader; the base checks the arrays, augments them
(reseeded per sample, see framework/data/base.py) and returns uint8 tensors, which the task
turns into floats on the device:

    ImageDataset        load_image(index) -> (HxWx3 uint8 RGB, name)
                        sample {"image": uint8 3xHxW, "index": int, "name": str}
    PairedImageDataset  load_pair(index) -> (input HxWx3, target HxWx3, name), uint8 RGB
                        sample {"input": uint8 3xHxW, "target": uint8 3xHxW, "index", "name"}

The target of a pair goes through the pipeline as an additional image, so a crop or a flip
is the same on both halves.

Files holding an input and its target side by side (pix2pix's layout: A | B, each half W wide) are
read the same way by training and by tools/infer.py: a dataset class whose files are such pairs
declares `side_by_side_layout(node)`, from its config node the folder whose split folders hold the
pairs (root/<split>/<name>.jpg) and the half training gives the generator ("left" for A, "right"
for B with `direction: BtoA`). tools/infer.py given a file of such a folder (the published test
split too, which no data section reads) translates that half, not the whole 2W-wide file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from framework.data.base import AugmentedDataset, split_item
from framework.errors import DataError
from framework.registry import DATASETS, is_node


def check_rgb(image: np.ndarray, what: str) -> None:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise DataError(f"{what}: expected an HxWx3 uint8 image, got {image.dtype} {image.shape}")


class ImageDataset(AugmentedDataset):
    """Images without labels. Subclasses implement `__len__` and `load_image`."""

    def __init__(self, pipeline: Sequence = ()):
        super().__init__(pipeline)

    def __len__(self) -> int:
        raise NotImplementedError

    def load_image(self, index: int) -> tuple[np.ndarray, str]:
        """(HxWx3 uint8 RGB image, sample name) before augmentation."""
        raise NotImplementedError

    def __getitem__(self, item: int | tuple[int, int]) -> dict:
        index, seed = split_item(item)
        image, name = self.load_image(index)
        check_rgb(image, name)
        augmented = self.augment(index, seed, image=image)
        return {"image": self._image_tensor(augmented["image"]), "index": index, "name": name}


class PairedImageDataset(AugmentedDataset):
    """Aligned input/target images. Subclasses implement `__len__` and `load_pair`."""

    def __init__(self, pipeline: Sequence = ()):
        super().__init__(pipeline, additional_targets={"target": "image"})

    def __len__(self) -> int:
        raise NotImplementedError

    def load_pair(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        """(input, target, sample name): HxWx3 uint8 RGB images of one size, before augmentation."""
        raise NotImplementedError

    def __getitem__(self, item: int | tuple[int, int]) -> dict:
        index, seed = split_item(item)
        source, target, name = self.load_pair(index)
        check_rgb(source, f"{name} (input)")
        check_rgb(target, f"{name} (target)")
        if source.shape != target.shape:
            raise DataError(f"{name}: input is {source.shape[0]}x{source.shape[1]} "
                            f"but its target is {target.shape[0]}x{target.shape[1]}")
        augmented = self.augment(index, seed, image=source, target=target)
        return {
            "input": self._image_tensor(augmented["image"]),
            "target": self._image_tensor(augmented["target"]),
            "index": index,
            "name": name,
        }


HALVES = ("left", "right")


def split_side_by_side(image: np.ndarray, path: str) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) halves of an image 2W wide; a DataError naming `path` when its width is odd."""
    if image.shape[1] % 2:
        raise DataError(f"{path}: width {image.shape[1]} is odd; expected A and B side by side, equally wide")
    half = image.shape[1] // 2
    return image[:, :half], image[:, half:]


def side_by_side_layouts(config: dict) -> dict[Path, str]:
    """{resolved root: input half} of the data sections of a (plain) config whose dataset reads
    side-by-side pairs; a relative root is read from the current folder, as training reads it."""
    layouts = {}
    for section in (config.get("data") or {}).values():
        node = section.get("dataset") if isinstance(section, dict) else None
        if not (is_node(node) and node["type"] in DATASETS):
            continue
        describe = getattr(DATASETS.get(node["type"]), "side_by_side_layout", None)
        if describe is not None:
            root, half = describe(node)
            layouts[Path(os.path.expanduser(str(root))).resolve()] = half
    return layouts


def input_half(path: Path, image: np.ndarray, layouts: dict[Path, str]) -> np.ndarray:
    """The half of `image` (read from `path`) training gives the generator when `path` lies in a split
    folder of a side-by-side root (root/<split>/<file>); else the image as it is."""
    half = layouts.get(Path(path).resolve().parent.parent)
    if half is None:
        return image
    left, right = split_side_by_side(image, str(path))
    return np.ascontiguousarray(left if half == "left" else right)

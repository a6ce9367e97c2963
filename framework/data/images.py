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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from framework.data.base import AugmentedDataset, split_item
from framework.errors import DataError


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

"""Unlabelled image datasets for unconditional GANs.

- `ImageFolder`: every image under a folder (recursively); resize/crop them with the pipeline.
- `ShapeImages`: the built-in synthetic shapes, images only (no files needed).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from framework.data import IMAGE_SUFFIXES, ImageDataset, SyntheticShapes, read_rgb_image, require_dir
from framework.errors import DataError
from framework.registry import DATASETS


@DATASETS.register()
class ImageFolder(ImageDataset):
    """Every image file under `root` (subfolders included), in sorted order. Give the pipeline
    a resize to one size, e.g. [{type: SmallestMaxSize, max_size: 64}, {type: CenterCrop,
    height: 64, width: 64}], so images batch together."""

    def __init__(self, root: str, pipeline: Sequence = ()):
        super().__init__(pipeline)
        self.root = require_dir(os.path.expanduser(str(root)))
        files = sorted(
            os.path.relpath(os.path.join(folder, name), self.root)
            for folder, _, names in os.walk(self.root)
            for name in names
            if name.lower().endswith(IMAGE_SUFFIXES)
        )
        if not files:
            raise DataError(f"{self.root}: no images (looked for {', '.join(IMAGE_SUFFIXES)}, subfolders included)")
        self.files = np.array(files)  # not a list of str: workers would copy it on read

    def __len__(self) -> int:
        return len(self.files)

    def load_image(self, index: int) -> tuple[np.ndarray, str]:
        name = str(self.files[index])
        return read_rgb_image(os.path.join(self.root, name)), os.path.splitext(name)[0]


@DATASETS.register()
class ShapeImages(ImageDataset):
    """The images of SyntheticShapes (shapes on textured backgrounds), without masks."""

    def __init__(self, num_samples: int = 1000, size: int = 32, seed: int = 0, min_shapes: int = 1,
                 max_shapes: int = 3, pipeline: Sequence = ()):
        super().__init__(pipeline)
        self.shapes = SyntheticShapes(num_samples=num_samples, size=size, seed=seed, min_shapes=min_shapes,
                                      max_shapes=max_shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def load_image(self, index: int) -> tuple[np.ndarray, str]:
        image, _, name = self.shapes.load_sample(index)
        return image, name

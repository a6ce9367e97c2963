"""Paired datasets for image-to-image translation.

- `AlignedPairs`: the pix2pix layout, root/<split>/*.jpg, each file the input and the target
  side by side (A | B); `direction: BtoA` swaps them.
- `FolderPairs`: root/<input_dir>/<name>.* paired with root/<target_dir>/<name>.* by name.
- `SyntheticPairs`: label map -> rendered image, drawn on the fly from a seed (no files).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import cv2
import numpy as np

from framework.data import (
    IMAGE_SUFFIXES,
    PairedImageDataset,
    SyntheticShapes,
    files_by_stem,
    read_rgb_image,
    require_all,
    require_dir,
)
from framework.data.images import split_side_by_side
from framework.errors import DataError
from framework.registry import DATASETS
from framework.visualization.palette import default_palette

DIRECTIONS = ("AtoB", "BtoA")


@DATASETS.register()
class AlignedPairs(PairedImageDataset):
    """root/<split>/<name>.<jpg|png|...>, each image 2W wide: A (left) | B (right)."""

    def __init__(self, root: str, split: str = "train", direction: str = "AtoB", pipeline: Sequence = ()):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        super().__init__(pipeline)
        self.folder = require_dir(os.path.join(os.path.expanduser(str(root)), split))
        files = files_by_stem(self.folder, IMAGE_SUFFIXES)
        if not files:
            raise DataError(f"{self.folder}: no images (looked for {', '.join(IMAGE_SUFFIXES)})")
        self.names = np.array(sorted(files))
        self.files = np.array([files[n] for n in self.names])
        self.swap = direction == "BtoA"

    def __len__(self) -> int:
        return len(self.names)

    @staticmethod
    def side_by_side_layout(node: dict) -> tuple[str, str]:
        """(root, the half given to the generator) of a config node: tools/infer.py reads a file of
        root/<split>/ as training does (framework/data/images.py)."""
        return str(node["root"]), "right" if node.get("direction") == "BtoA" else "left"

    def load_pair(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        path = os.path.join(self.folder, str(self.files[index]))
        a, b = split_side_by_side(read_rgb_image(path), path)
        return (b, a, str(self.names[index])) if self.swap else (a, b, str(self.names[index]))


@DATASETS.register()
class FolderPairs(PairedImageDataset):
    """root/<input_dir>/<name>.* and root/<target_dir>/<name>.*, paired by name; every input
    needs a target."""

    def __init__(self, root: str, input_dir: str = "A", target_dir: str = "B", pipeline: Sequence = ()):
        super().__init__(pipeline)
        root = require_dir(os.path.expanduser(str(root)))
        self.input_dir = require_dir(os.path.join(root, input_dir))
        self.target_dir = require_dir(os.path.join(root, target_dir))
        inputs = files_by_stem(self.input_dir, IMAGE_SUFFIXES)
        targets = files_by_stem(self.target_dir, IMAGE_SUFFIXES)
        if not inputs:
            raise DataError(f"{self.input_dir}: no images (looked for {', '.join(IMAGE_SUFFIXES)})")
        names = sorted(inputs)
        require_all(names, targets, "target image", self.target_dir)
        self.names = np.array(names)
        self.input_files = np.array([inputs[n] for n in names])
        self.target_files = np.array([targets[n] for n in names])

    def __len__(self) -> int:
        return len(self.names)

    def load_pair(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        source = read_rgb_image(os.path.join(self.input_dir, str(self.input_files[index])))
        target = read_rgb_image(os.path.join(self.target_dir, str(self.target_files[index])))
        return source, target, str(self.names[index])


# Rendering of SyntheticPairs: each class has its own material colour; shapes are shaded
# darker towards their edges (a bevel) and cast a soft shadow to the lower right on the
# background. All of it follows from the label map, so a generator can learn it exactly,
# up to the sensor noise.
MATERIAL_COLORS = np.array([[205, 195, 170], [205, 70, 55], [70, 150, 80], [60, 90, 200]], np.float32)
BEVEL_WIDTH = 5.0  # pixels at 64x64, scaled with the image
SHADOW_OFFSET = 3
SHADOW_WIDTH = 4.0
SHADOW_STRENGTH = 0.45
SENSOR_NOISE_STD = 3.0


@DATASETS.register()
class SyntheticPairs(PairedImageDataset):
    """Input: a label map of the built-in shapes (background, circle, rectangle, triangle) in
    palette colours. Target: the scene rendered with a material per class, bevel shading and
    shadows. Sample i is a pure function of (seed, i)."""

    def __init__(self, num_samples: int = 1000, size: int = 64, seed: int = 0, min_shapes: int = 1,
                 max_shapes: int = 4, pipeline: Sequence = ()):
        super().__init__(pipeline)
        self.layouts = SyntheticShapes(num_samples=num_samples, size=size, seed=seed, min_shapes=min_shapes,
                                       max_shapes=max_shapes)
        self.label_colors = default_palette(len(MATERIAL_COLORS))
        self.scale = size / 64

    def __len__(self) -> int:
        return len(self.layouts)

    def load_pair(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        _, mask, name = self.layouts.load_sample(index)
        label_map = self.label_colors[mask]
        return label_map, self.render(mask, np.random.default_rng([self.layouts.seed, index, 1])), name

    def render(self, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        shade = np.ones(mask.shape, np.float32)
        for label in range(1, len(MATERIAL_COLORS)):
            inside = (mask == label).astype(np.uint8)
            if inside.any():
                depth = cv2.distanceTransform(inside, cv2.DIST_L2, 3)
                bevel = np.clip(depth / (BEVEL_WIDTH * self.scale), 0, 1)
                shade = np.where(inside > 0, 0.55 + 0.45 * bevel, shade)
        shapes = (mask > 0).astype(np.uint8)
        offset = round(SHADOW_OFFSET * self.scale)
        caster = np.zeros_like(shapes)
        caster[offset:, offset:] = shapes[:-offset, :-offset]
        distance = cv2.distanceTransform(1 - caster, cv2.DIST_L2, 3)
        shadow = SHADOW_STRENGTH * np.exp(-distance / (SHADOW_WIDTH * self.scale))
        shade = np.where(shapes > 0, shade, 1 - shadow)
        image = MATERIAL_COLORS[mask] * shade[..., None]
        image += rng.standard_normal(image.shape, dtype=np.float32) * SENSOR_NOISE_STD
        return np.clip(image, 0, 255).astype(np.uint8)

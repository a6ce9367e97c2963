"""TwoStyleShapes: the built-in unpaired data of the CycleGAN example (no files, no download).

The framework's SyntheticShapes layouts (circles, rectangles, triangles) drawn in two styles:

    A: flat shapes in warm colours on a light background
    B: the same kinds of shapes in other colours on a dark background, each outlined in white

Translating A -> B means recolouring every shape by its kind and drawing its outline; B -> A
means recolouring and erasing the outline. Training data is unpaired: domain B's layouts come
from another seed than A's. `paired: true` (the evaluation split) renders B from A's layouts,
with the same sample names, so the ground truth of each translation exists and PSNR/SSIM/L1
measure how well each direction has been learned.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from framework.data import SyntheticShapes, UnpairedImageDataset
from framework.registry import DATASETS

# background, circle, rectangle, triangle
STYLE_A = np.array([[225, 220, 205], [205, 60, 50], [225, 150, 40], [150, 60, 140]], np.uint8)
STYLE_B = np.array([[30, 35, 70], [240, 210, 60], [70, 200, 220], [120, 220, 90]], np.uint8)
OUTLINE_B = np.array([245, 245, 245], np.uint8)
B_LAYOUT_SEED_OFFSET = 7919  # B's layouts in unpaired mode: another seed, so no B matches an A


@DATASETS.register()
class TwoStyleShapes(UnpairedImageDataset):
    """`num_samples` images per domain of `size` x `size`; sample names `shapes_NNNNNN` (A and,
    when paired, B) and `b_shapes_NNNNNN` (B, unpaired)."""

    def __init__(self, num_samples: int = 1000, size: int = 64, seed: int = 0, paired: bool = False,
                 serial: bool = False, pipeline: Sequence = ()):
        super().__init__(pipeline, serial)
        self.layouts_a = SyntheticShapes(num_samples=num_samples, size=size, seed=seed)
        self.layouts_b = self.layouts_a if paired else SyntheticShapes(
            num_samples=num_samples, size=size, seed=seed + B_LAYOUT_SEED_OFFSET)
        self.names_a = [f"shapes_{i:06d}" for i in range(num_samples)]
        self.names_b = self.names_a if paired else [f"b_shapes_{i:06d}" for i in range(num_samples)]
        self.outline = max(1, round(size / 64))

    def load_a(self, index: int) -> np.ndarray:
        return STYLE_A[self.layouts_a.load_sample(index)[1]]

    def load_b(self, index: int) -> np.ndarray:
        mask = self.layouts_b.load_sample(index)[1]
        image = STYLE_B[mask]
        kernel = np.ones((2 * self.outline + 1,) * 2, np.uint8)
        edges = cv2.morphologyEx(mask, cv2.MORPH_GRADIENT, kernel) > 0  # where the class changes
        image[edges & (mask > 0)] = OUTLINE_B  # the outline lies inside each shape
        return image

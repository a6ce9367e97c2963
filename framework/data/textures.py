"""SyntheticTextures: scenes of Voronoi regions whose 7 classes differ by texture alone.

The built-in dataset for semantic image synthesis (and for segmenters): the colour of a region
says nothing of its class. Each image has one random base colour; each region adds to it a
grey texture of its class (plain, stripes in three directions, checks, dots, grain) shifted to
a zero mean over the region's own pixels, so every region of an image has the image's mean
colour (before the sensor noise and rounding) and, over the dataset, every class the same mean
colour. A painting of each region in its mean colour is one flat colour per image: only the
texture tells the classes apart. That is what a synthesiser must learn to draw, and what a
segmenter trained on these images can check in generated ones (metrics/segmenter_score.py).

Sample `i` is a pure function of (seed, i). At 64x64 a sample renders in well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from framework.data.base import SegmentationDataset
from framework.registry import DATASETS

TEXTURE_CLASSES = ("plain", "horizontal_stripes", "vertical_stripes", "diagonal_stripes", "checks", "dots", "grain")
BASE_COLOUR_RANGE = (70.0, 170.0)  # keeps base + texture + noise inside 0..255: no clipping bias
TEXTURE_AMPLITUDE = 40.0
NOISE_STD = 3.0
STRIPE_PERIOD = 6.0  # pixels at 64x64, scaled with the image
DOT_PERIOD = 8.0
ANGLE_JITTER = np.deg2rad(10.0)  # stripes of one class stay within +-10 degrees of their direction
DOT_THRESHOLD = 0.5  # (cos + cos) / 2 above it is a dot: about a fifth of the area


@DATASETS.register()
class SyntheticTextures(SegmentationDataset):
    """`num_samples` images of `size` ([h, w] or one int), each of min..max_regions Voronoi
    regions with a class drawn uniformly per region."""

    def __init__(
        self,
        num_samples: int = 300,
        size: int | Sequence[int] = 64,
        seed: int = 0,
        min_regions: int = 3,
        max_regions: int = 6,
        pipeline: Sequence = (),
        ignore_index: int = 255,
        palette: Sequence[Sequence[int]] | None = None,
    ):
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if not 1 <= min_regions <= max_regions:
            raise ValueError(f"need 1 <= min_regions <= max_regions, got {min_regions} and {max_regions}")
        self.height, self.width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        if min(self.height, self.width) < 16:
            raise ValueError(f"size must be at least 16 pixels per side, got {size}")
        super().__init__(pipeline=pipeline, classes=TEXTURE_CLASSES, ignore_index=ignore_index, palette=palette)
        self.num_samples = num_samples
        self.seed = seed
        self.min_regions, self.max_regions = min_regions, max_regions
        scale = min(self.height, self.width) / 64
        self.stripe_period, self.dot_period = STRIPE_PERIOD * scale, DOT_PERIOD * scale
        self.grid_y, self.grid_x = np.meshgrid(np.arange(self.height, dtype=np.float32),
                                               np.arange(self.width, dtype=np.float32), indexing="ij")

    def __len__(self) -> int:
        return self.num_samples

    def load_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        if not 0 <= index < self.num_samples:
            raise IndexError(f"SyntheticTextures index {index} out of range [0, {self.num_samples})")
        rng = np.random.default_rng([self.seed, index])
        regions = self._voronoi(rng, int(rng.integers(self.min_regions, self.max_regions + 1)))
        classes = rng.integers(0, self.num_classes, regions.max() + 1)
        mask = classes[regions].astype(np.uint8)
        texture = np.zeros((self.height, self.width), np.float32)
        for region, kind in enumerate(classes):
            inside = regions == region
            if inside.any():
                pattern = self._texture(int(kind), rng)[inside]
                texture[inside] = pattern - pattern.mean()  # the region's mean is the base colour
        base = rng.uniform(*BASE_COLOUR_RANGE, 3).astype(np.float32)
        image = base + TEXTURE_AMPLITUDE * texture[..., None]
        image += rng.standard_normal(image.shape, dtype=np.float32) * NOISE_STD
        return np.clip(np.rint(image), 0, 255).astype(np.uint8), mask, f"textures_{index:06d}"

    def _voronoi(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """H x W region ids: the nearest of `count` random centres."""
        centres = rng.uniform((0, 0), (self.height, self.width), (count, 2)).astype(np.float32)
        distances = (self.grid_y[None] - centres[:, 0, None, None]) ** 2 + (self.grid_x[None] - centres[:, 1, None, None]) ** 2
        return distances.argmin(axis=0)

    def _along(self, angle: float, rng: np.random.Generator) -> np.ndarray:
        """Phase (radians) of stripes running at `angle` (+- jitter), a random offset."""
        angle += rng.uniform(-ANGLE_JITTER, ANGLE_JITTER)
        across = self.grid_y * np.float32(np.cos(angle)) - self.grid_x * np.float32(np.sin(angle))
        return 2 * np.pi * across / self.stripe_period + np.float32(rng.uniform(0, 2 * np.pi))

    def _texture(self, kind: int, rng: np.random.Generator) -> np.ndarray:
        """An H x W texture of class `kind`, roughly in [-1, 1.6] (its mean is removed by the caller)."""
        name = TEXTURE_CLASSES[kind]
        if name == "plain":
            return np.zeros((self.height, self.width), np.float32)
        if name == "horizontal_stripes":
            return np.sin(self._along(0.0, rng))
        if name == "vertical_stripes":
            return np.sin(self._along(np.pi / 2, rng))
        if name == "diagonal_stripes":
            return np.sin(self._along(np.pi / 4, rng))
        if name == "grain":
            return rng.uniform(-1, 1, (self.height, self.width)).astype(np.float32)
        period = self.stripe_period if name == "checks" else self.dot_period
        phase_y, phase_x = rng.uniform(0, 2 * np.pi, 2).astype(np.float32)
        wave_y = np.cos(2 * np.pi * self.grid_y / period + phase_y)
        wave_x = np.cos(2 * np.pi * self.grid_x / period + phase_x)
        if name == "checks":
            return np.sign(wave_y * wave_x).astype(np.float32)
        return ((wave_y + wave_x) / 2 > DOT_THRESHOLD).astype(np.float32) * 1.6  # dots

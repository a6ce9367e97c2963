"""Base classes of datasets: seeded augmentation, and segmentation samples with checked masks.

`AugmentedDataset` holds an albumentations pipeline. `dataset[(index, seed)]` reseeds the
augmentation from (index, seed) first, so a sample's augmentation does not depend on which
worker or process loads it: that is what makes a resumed run and a DDP run see exactly the
samples of an uninterrupted single-process run. (The training sampler yields such pairs to
datasets with `takes_sample_seed = True`, plain ints to others; evaluation indexes with plain
ints and augments without reseeding.)

`SegmentationDataset`: a subclass implements `__len__` and `load_sample(index) -> (image, mask,
name)`; the base checks the raw mask, augments image and mask together and returns tensors:

    {"image": uint8 3xHxW RGB (not normalised), "mask": int64 HxW, "index": int, "name": str}

GAN datasets (framework/data/images.py) share `AugmentedDataset` with a paired image target.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from framework.data.transforms import build_pipeline
from framework.errors import ConfigError, DataError
from framework.visualization.palette import default_palette

MASK64 = (1 << 64) - 1


def stream_words(seed: int, index: int, count: int) -> list[int]:
    """`count` well-mixed 64-bit words from (seed, index): splitmix64 (Steele et al., 2014)
    of a counter that starts at a hash of the pair."""
    state = mix64(mix64(seed) ^ index)
    return [mix64(state + k * 0x9E3779B97F4A7C15) for k in range(1, count + 1)]


def mix64(value: int) -> int:
    """splitmix64's finaliser: every output bit depends on every input bit."""
    value &= MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def split_item(item: int | tuple[int, int]) -> tuple[int, int | None]:
    """`index` or `(index, seed)` (what the training sampler yields) -> (index, seed or None)."""
    index, seed = item if isinstance(item, tuple) else (item, None)
    return int(index), None if seed is None else int(seed)


class AugmentedDataset(Dataset):
    """A dataset whose samples go through an albumentations pipeline reseeded per sample.

    `additional_targets` names extra arrays the pipeline transforms exactly like the image
    (e.g. {"target": "image"} for a paired image), as in albumentations' Compose.
    """

    takes_sample_seed = True  # the training sampler yields (index, seed) pairs to it
    _random_streams: tuple[np.random.Generator, random.Random] | None = None  # made on first reseed

    def __init__(self, pipeline: Sequence = (), additional_targets: dict[str, str] | None = None):
        self.pipeline = build_pipeline(pipeline, additional_targets)

    def augment(self, index: int, seed: int | None, **arrays) -> dict:
        """Run the pipeline on `arrays` (image=..., mask=..., ...), reseeded first when `seed` is given."""
        if seed is not None:
            self._reseed(index, seed)
        return self.pipeline(**arrays)

    def _reseed(self, index: int, seed: int) -> None:
        # One random stream shared by every transform, as Compose sets up at construction.
        # (Compose.set_random_seed gives each transform its own generator with the same seed,
        # which correlates them: two p=0.5 flips would always fire together.)
        # The two generators are made once and put in the sample's state in place: making new
        # SeedSequence, Generator and Random objects cost ~15 us per sample, this ~7.
        if self._random_streams is None:
            self._random_streams = (np.random.Generator(np.random.PCG64()), random.Random())
        numpy_random, python_random = self._random_streams
        words = stream_words(seed, index, 5)
        numpy_random.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": words[0] << 64 | words[1], "inc": words[2] << 64 | words[3] | 1},
            "has_uint32": 0,
            "uinteger": 0,
        }
        python_random.seed(words[4])
        self.pipeline.set_random_state(numpy_random, python_random)

    def _image_tensor(self, image) -> torch.Tensor:
        if isinstance(image, np.ndarray):  # HxWxC -> CxHxW; a ToTensorV2 already did this
            image = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
        if image.dtype != torch.uint8 and not (getattr(self, "channels", None) and image.dtype == torch.float32):
            raise ConfigError(
                f"the pipeline of {type(self).__name__} turned the image into {image.dtype}; keep it uint8 "
                "(no Normalize/ToFloat): the task normalises images on the device"
            )
        return image


class SegmentationDataset(AugmentedDataset):
    """Images with per-pixel class masks. Subclasses implement `__len__` and `load_sample`."""

    channels: int | None = None  # None: uint8 RGB; N: N channels, uint8 or float32 (framework/data/channels.py)

    def __init__(
        self,
        pipeline: Sequence = (),
        classes: Sequence[str] | None = None,
        ignore_index: int = 255,
        palette: Sequence[Sequence[int]] | None = None,
    ):
        if not classes:
            raise ValueError("classes must list the class names, e.g. [background, road, car]")
        self.class_names = tuple(str(c) for c in classes)
        self.num_classes = len(self.class_names)
        self.ignore_index = ignore_index
        palette = [tuple(c) for c in default_palette(self.num_classes).tolist()] if palette is None else [tuple(int(v) for v in c) for c in palette]
        if len(palette) < self.num_classes or any(len(c) != 3 for c in palette):
            raise ValueError(f"palette needs one RGB triple per class ({self.num_classes}), got {palette}")
        self.palette = palette[: self.num_classes]
        super().__init__(pipeline)

    def __len__(self) -> int:
        raise NotImplementedError

    def load_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        """(HxWx3 uint8 RGB image, HxW integer mask, sample name) before augmentation."""
        raise NotImplementedError

    def mask_path(self, index: int) -> str:
        """Where sample `index`'s mask comes from, for error messages."""
        return f"{type(self).__name__}[{index}]"

    def __getitem__(self, item: int | tuple[int, int]) -> dict:
        index, seed = split_item(item)
        image, mask, name = self.load_sample(index)
        self._check_sample(index, name, image, mask)
        augmented = self.augment(index, seed, image=image, mask=mask)
        return {
            "image": self._image_tensor(augmented["image"]),
            "mask": self._mask_tensor(augmented["mask"]),
            "index": index,
            "name": name,
        }

    def _check_sample(self, index: int, name: str, image: np.ndarray, mask: np.ndarray) -> None:
        channels, dtypes = (3, (np.uint8,)) if self.channels is None else (self.channels, (np.uint8, np.float32))
        if image.ndim != 3 or image.shape[2] != channels or image.dtype not in dtypes:
            raise DataError(f"{name}: expected an HxWx{channels} uint8 image, got {image.dtype} {image.shape}")
        if mask.dtype.kind not in "iu":
            raise DataError(f"{self.mask_path(index)}: mask holds {mask.dtype} values, not integer class indices")
        if mask.shape != image.shape[:2]:
            raise DataError(
                f"{self.mask_path(index)}: mask is {mask.shape[0]}x{mask.shape[1]} "
                f"but its image is {image.shape[0]}x{image.shape[1]}{self.size_mismatch_hint(index, image, mask)}"
            )
        bad = self._bad_mask_values(mask)
        if bad:
            raise DataError(
                f"{self.mask_path(index)}: mask values {bad} outside [0, {self.num_classes}) "
                f"(ignore_index {self.ignore_index})"
            )

    def size_mismatch_hint(self, index: int, image: np.ndarray, mask: np.ndarray) -> str:
        """More to say when sample `index`'s mask and image sizes differ ("; ..."), or ""."""
        return ""

    def _bad_mask_values(self, mask: np.ndarray) -> list[int]:
        if mask.dtype == np.uint8:  # bincount over 256 bins is much cheaper than sorting
            present = np.flatnonzero(np.bincount(mask.ravel(), minlength=256))
        else:
            present = np.unique(mask)
        outside = (present < 0) | (present >= self.num_classes)
        return [int(v) for v in present[outside] if v != self.ignore_index]

    @staticmethod
    def _mask_tensor(mask) -> torch.Tensor:
        if isinstance(mask, torch.Tensor):  # a ToTensorV2 in the pipeline
            return mask.to(torch.int64)
        # Flips return negative-stride views, which torch cannot wrap: copy to contiguous.
        return torch.from_numpy(np.ascontiguousarray(mask, dtype=np.int64))

"""One pass over a GAN dataset's images, before augmentation: each image's size and what is wrong
with it (unreadable, not HxWx3 uint8, a pair whose halves differ in size).

The counterpart of dataset_scan.py (images with class masks) for the datasets of
framework/data/images.py and unpaired.py: single images (DCGAN), input/target pairs (pix2pix)
and two unpaired domains (CycleGAN: every image of A and of B once, so a broken file in trainA
is named here instead of when a training step first draws it). Used by tools/check_dataset.py;
images are read in DataLoader workers, each read yields a small record, never the pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from framework.analysis.dataset_scan import collect_records
from framework.data.images import ImageDataset, PairedImageDataset, check_rgb
from framework.data.unpaired import UnpairedImageDataset
from framework.errors import DataError

IMAGE_DATASETS = (ImageDataset, PairedImageDataset, UnpairedImageDataset)


@dataclass
class ImageRecord:
    part: str  # "image", "pair", "A" or "B"
    index: int
    name: str = ""
    size: tuple[int, int] | None = None  # height, width
    problem: str | None = None


def image_reads(dataset) -> list[tuple[str, int]]:
    """(part, index) of every read the scan makes: each stored image once."""
    if isinstance(dataset, UnpairedImageDataset):
        return [("A", i) for i in range(len(dataset.names_a))] + [("B", j) for j in range(len(dataset.names_b))]
    return [("pair" if isinstance(dataset, PairedImageDataset) else "image", i) for i in range(len(dataset))]


def inspect_image(dataset, part: str, index: int) -> ImageRecord:
    record = ImageRecord(part, index)
    try:
        if part in ("A", "B"):
            names = dataset.names_a if part == "A" else dataset.names_b
            record.name = str(names[index])
            image = dataset.load_a(index) if part == "A" else dataset.load_b(index)
            check_rgb(image, f"{record.name} ({part})")
        elif part == "pair":
            source, target, record.name = dataset.load_pair(index)
            check_rgb(source, f"{record.name} (input)")
            check_rgb(target, f"{record.name} (target)")
            if source.shape != target.shape:  # the words of PairedImageDataset.__getitem__
                raise DataError(f"{record.name}: input is {source.shape[0]}x{source.shape[1]} "
                                f"but its target is {target.shape[0]}x{target.shape[1]}")
            image = source
        else:
            image, record.name = dataset.load_image(index)
            check_rgb(image, str(record.name))
        record.size = tuple(image.shape[:2])
    except DataError as err:
        record.problem = str(err)
    return record


class _Reads(torch.utils.data.Dataset):
    def __init__(self, dataset):
        self.dataset, self.reads = dataset, np.array(image_reads(dataset), dtype=object)

    def __len__(self) -> int:
        return len(self.reads)

    def __getitem__(self, k: int) -> ImageRecord:
        part, index = self.reads[k]
        return inspect_image(self.dataset, part, int(index))


def scan_images(dataset, workers: int = 0, on_record=None) -> list[ImageRecord]:
    """Inspect every image of `dataset` (in `workers` processes); `on_record(done)` after each one."""
    return collect_records(_Reads(dataset), workers, on_record)


def image_counts(dataset) -> str:
    """'A 12 images, B 10 images' / '16 pairs' / '16 images'."""
    if isinstance(dataset, UnpairedImageDataset):
        return f"A {len(dataset.names_a)} images, B {len(dataset.names_b)} images"
    return f"{len(dataset)} {'pairs' if isinstance(dataset, PairedImageDataset) else 'images'}"

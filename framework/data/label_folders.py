"""LabelImageFolders: SPADE's custom layout, a folder of label maps and a folder of images paired
by file stem (`label_dir/<name>.png` with `image_dir/<name>.<jpg|png|...>`).

A SegmentationDataset like ImageMaskFolder (same sample dict, same mask checks, same reading
of images and masks, framework/data/folder.py), for datasets laid out as SPADE's
`--dataset_mode custom --label_dir ... --image_dir ...` expects. Built with one line naming
what is wrong: files of either folder with no partner, and (reading only the file headers)
pairs whose sizes differ, before anything trains.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from PIL import Image

from framework.data.folder import (
    IMAGE_SUFFIXES,
    MAX_NAMES_IN_MESSAGE,
    TURNED_BY_90,
    _FolderDataset,
    exif_orientation,
    files_by_stem,
    require_dir,
)
from framework.errors import DataError
from framework.registry import DATASETS


def _listed(names: list[str]) -> str:
    return ", ".join(names[:MAX_NAMES_IN_MESSAGE]) + (", ..." if len(names) > MAX_NAMES_IN_MESSAGE else "")


def unpaired_message(labels: dict[str, str], images: dict[str, str], label_dir: str, image_dir: str) -> str:
    """What does not pair, both ways, in one line; "" when every file has its partner."""
    lone_labels = sorted(labels[stem] for stem in labels.keys() - images.keys())
    lone_images = sorted(images[stem] for stem in images.keys() - labels.keys())
    parts = []
    if lone_labels:
        parts.append(f"{len(lone_labels)} label file(s) in {label_dir} have no image in {image_dir}: "
                     f"{_listed(lone_labels)}")
    if lone_images:
        parts.append(f"{len(lone_images)} image(s) in {image_dir} have no label file in {label_dir}: "
                     f"{_listed(lone_images)}")
    return "; ".join(parts)


def shown_size(path: str, turned_by_exif: bool) -> tuple[int, int] | None:
    """(height, width) from the file's header; of an image as it is read (`turned_by_exif`: by
    its EXIF orientation, as read_rgb_image reads it), or as stored (a label map)."""
    try:
        with Image.open(path) as opened:
            width, height = opened.size
    except (OSError, ValueError, Image.DecompressionBombError):
        return None  # unreadable: the sample's read names it
    return (width, height) if turned_by_exif and exif_orientation(path) in TURNED_BY_90 else (height, width)


@DATASETS.register()
class LabelImageFolders(_FolderDataset):
    """label_dir/<name><label_suffix> (class ids: palette or single-channel PNG) paired with
    image_dir/<name>.<jpg|jpeg|png|bmp|tif|tiff>. Every file must have its partner."""

    def __init__(
        self,
        label_dir: str,
        image_dir: str,
        classes: Sequence[str],
        label_suffix: str = ".png",
        pipeline: Sequence = (),
        ignore_index: int = 255,
        palette: Sequence[Sequence[int]] | None = None,
        check_sizes: bool = True,
    ):
        super().__init__(pipeline=pipeline, classes=classes, ignore_index=ignore_index, palette=palette)
        self.mask_dir = require_dir(os.path.expanduser(str(label_dir)))
        self.image_dir = require_dir(os.path.expanduser(str(image_dir)))
        labels = files_by_stem(self.mask_dir, [label_suffix])
        images = files_by_stem(self.image_dir, IMAGE_SUFFIXES)
        if not labels:
            raise DataError(f"{self.mask_dir}: no label files (looked for *{label_suffix})")
        problem = unpaired_message(labels, images, self.mask_dir, self.image_dir)
        if problem:
            raise DataError(problem)
        names = sorted(labels)
        self._set_samples(names, [images[n] for n in names], [labels[n] for n in names])
        if check_sizes:
            self._check_pair_sizes()

    def _check_pair_sizes(self) -> None:
        differing = []
        for index in range(len(self)):
            image_size = shown_size(self.image_path(index), turned_by_exif=True)
            label_size = shown_size(self.mask_path(index), turned_by_exif=False)
            if image_size and label_size and image_size != label_size:
                differing.append(f"{self.names[index]} (image {image_size[0]}x{image_size[1]}, "
                                 f"label {label_size[0]}x{label_size[1]})")
        if differing:
            raise DataError(f"{len(differing)} label/image pair(s) differ in size in {self.mask_dir} and "
                            f"{self.image_dir}: {_listed(differing)}")

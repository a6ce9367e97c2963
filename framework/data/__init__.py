"""Datasets and transforms: importing this package registers them in DATASETS and TRANSFORMS.

Owns: datasets (`base.py`, `folder.py`, `images.py`, `unpaired.py`, `shapes.py`, the published
layouts in `published/` (Cityscapes, ADE20K, COCO-Stuff, VOC + SBD), N-channel reading
in `channels.py`, side-by-side pair files in `images.py`), the albumentations pipeline (`transforms.py`), samplers (`sampler.py`), loaders
(`loader.py`, batching samples of one size: `collate.py`), the decoded-sample cache (`cache.py`)
and the folders a dataset reads (`sources.py`).
May import: errors, registry, dist, visualization (a dataset's palette), runtime (the fixture writer's
refusal to write over files it did not create).

Dataset authors (projects, user code) also get the folder toolkit the built-in datasets use:
`IMAGE_SUFFIXES`, `read_rgb_image`, `files_by_stem`, `require_dir`, `require_all`.
"""

from framework.data.base import AugmentedDataset, SegmentationDataset
from framework.data.folder import (
    IMAGE_SUFFIXES,
    ImageMaskFolder,
    files_by_stem,
    read_rgb_image,
    require_all,
    require_dir,
)
from framework.data.images import ImageDataset, PairedImageDataset
from framework.data.label_folders import LabelImageFolders
from framework.data.published import ADE20K, Cityscapes, COCOStuff, VOCSegmentation
from framework.data.shapes import SyntheticShapes
from framework.data.textures import SyntheticTextures
from framework.data.transforms import build_pipeline
from framework.data.unpaired import UnpairedImageDataset, UnpairedImageFolders

__all__ = [
    "IMAGE_SUFFIXES",
    "files_by_stem",
    "read_rgb_image",
    "require_all",
    "require_dir",
    "ADE20K",
    "AugmentedDataset",
    "COCOStuff",
    "Cityscapes",
    "ImageDataset",
    "PairedImageDataset",
    "ImageMaskFolder",
    "LabelImageFolders",
    "SegmentationDataset",
    "SyntheticShapes",
    "SyntheticTextures",
    "UnpairedImageDataset",
    "UnpairedImageFolders",
    "VOCSegmentation",
    "build_pipeline",
]

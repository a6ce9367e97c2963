"""Datasets and transforms: importing this package registers them in DATASETS and TRANSFORMS."""

from framework.data.base import AugmentedDataset, SegmentationDataset
from framework.data.folder import ImageMaskFolder, VOCSegmentation
from framework.data.images import ImageDataset, PairedImageDataset
from framework.data.shapes import SyntheticShapes
from framework.data.transforms import build_pipeline

__all__ = [
    "AugmentedDataset",
    "ImageDataset",
    "PairedImageDataset",
    "ImageMaskFolder",
    "SegmentationDataset",
    "SyntheticShapes",
    "VOCSegmentation",
    "build_pipeline",
]

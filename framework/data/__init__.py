"""Datasets and transforms: importing this package registers them in DATASETS and TRANSFORMS."""

from framework.data.base import SegmentationDataset
from framework.data.folder import ImageMaskFolder, VOCSegmentation
from framework.data.shapes import SyntheticShapes
from framework.data.transforms import build_pipeline

__all__ = [
    "ImageMaskFolder",
    "SegmentationDataset",
    "SyntheticShapes",
    "VOCSegmentation",
    "build_pipeline",
]

"""Metrics. Importing this package registers them in METRICS.

Owns: the `Metric` contract of summed device states and the naming of results (`base.py`),
segmentation confusion-matrix metrics (`segmentation.py`), PSNR/SSIM/L1/FID (`image.py`), SWD and
MS-SSIM diversity (`generative.py`).
May import: errors, registry, dist (gathers under DDP), serialization (FID's Inception file),
visualization (the confusion-matrix picture).
"""

from framework.metrics import base, generative, image, segmentation  # noqa: F401
from framework.metrics.base import Metric, is_per_class, json_safe, summary_values
from framework.metrics.generative import SWD, MSSSIMDiversity
from framework.metrics.image import FID, PSNR, SSIM, L1Distance
from framework.metrics.segmentation import SegmentationMetrics

__all__ = ["Metric", "is_per_class", "json_safe", "summary_values", "SegmentationMetrics", "PSNR", "SSIM", "L1Distance", "FID", "SWD", "MSSSIMDiversity"]

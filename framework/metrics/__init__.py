"""Metrics. Importing this package registers them in METRICS.

Owns: the `Metric` contract of summed device states and the naming of results (`base.py`),
segmentation confusion-matrix metrics (`segmentation.py`), PSNR/SSIM/L1/FID (`image.py`), KID
(`kid.py`), SWD and MS-SSIM diversity (`generative.py`), and semantic synthesis's SegmenterScore
(`segmenter_score.py`: a segmentation run scores generated images) and Diversity (`diversity.py`).
May import: errors, registry, dist (gathers under DDP), serialization (FID's Inception file),
visualization (the confusion-matrix picture), config and models (SegmenterScore builds a
segmentation run's network from its config).
"""

from framework.metrics import base, diversity, generative, image, kid, segmentation, segmenter_score  # noqa: F401
from framework.metrics.base import Metric, is_per_class, json_safe, summary_values
from framework.metrics.diversity import Diversity
from framework.metrics.generative import SWD, MSSSIMDiversity
from framework.metrics.image import FID, PSNR, SSIM, L1Distance
from framework.metrics.kid import KID
from framework.metrics.segmentation import SegmentationMetrics
from framework.metrics.segmenter_score import SegmenterScore

__all__ = ["Metric", "is_per_class", "json_safe", "summary_values", "SegmentationMetrics", "PSNR", "SSIM",
           "L1Distance", "FID", "SWD", "MSSSIMDiversity", "Diversity", "SegmenterScore", "KID"]

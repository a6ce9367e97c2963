"""Metrics. Importing this package registers them in METRICS.

Owns: what is measured on a task's evaluation outputs (segmentation confusion matrices, image
quality, FID/KID/SWD, the synthesis metrics SegmenterScore and Diversity), as summable device
states or gathered features (`base.py`), and each metric's result names.
May import: `framework.errors`, `framework.registry`, `framework.serialization` (weight files),
`framework.config` (SegmenterScore reads a segmentation run's config), `framework.models`
(networks built from such a config), `framework.visualization`; never tasks or the engine.
"""

from framework.metrics import base, diversity, generative, image, kid, segmentation, segmenter_score  # noqa: F401
from framework.metrics.base import Metric, is_per_class, json_safe, summary_values
from framework.metrics.diversity import Diversity
from framework.metrics.generative import SWD, MSSSIMDiversity
from framework.metrics.image import FID, PSNR, SSIM, L1Distance
from framework.metrics.kid import KID
from framework.metrics.segmentation import SegmentationMetrics
from framework.metrics.segmenter_score import SegmenterScore

__all__ = ["Metric", "is_per_class", "json_safe", "summary_values", "SegmentationMetrics", "PSNR", "SSIM", "L1Distance", "FID", "SWD", "MSSSIMDiversity",
           "Diversity", "SegmenterScore", "KID"]

"""Metrics. Importing this package registers them in METRICS."""

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

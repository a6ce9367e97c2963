"""Metrics. Importing this package registers them in METRICS."""

from framework.metrics import base, segmentation  # noqa: F401
from framework.metrics.base import Metric
from framework.metrics.segmentation import SegmentationMetrics

__all__ = ["Metric", "SegmentationMetrics"]

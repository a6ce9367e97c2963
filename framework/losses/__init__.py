"""Losses. Importing this package registers them in LOSSES."""

from framework.losses import segmentation  # noqa: F401
from framework.losses.segmentation import BCEWithLogitsLoss, CombinedLoss, CrossEntropyLoss, DiceLoss

__all__ = ["CrossEntropyLoss", "BCEWithLogitsLoss", "DiceLoss", "CombinedLoss"]

"""Losses. Importing this package registers them in LOSSES."""

from framework.losses import gan, segmentation  # noqa: F401
from framework.losses.gan import GAN_LOSS_TYPES, GANLoss, gradient_penalty
from framework.losses.segmentation import BCEWithLogitsLoss, CombinedLoss, CrossEntropyLoss, DiceLoss

__all__ = ["CrossEntropyLoss", "BCEWithLogitsLoss", "DiceLoss", "CombinedLoss", "GANLoss", "GAN_LOSS_TYPES",
           "gradient_penalty"]

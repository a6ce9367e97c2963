"""Losses. Importing this package registers them in LOSSES."""

from framework.losses import feature_matching, gan, hard_pixels, oasis, perceptual, segmentation  # noqa: F401
from framework.losses.feature_matching import FeatureMatchingLoss
from framework.losses.gan import GAN_LOSS_TYPES, GANLoss, gradient_penalty, r1_penalty
from framework.losses.hard_pixels import FocalLoss, LovaszLoss, TverskyLoss
from framework.losses.perceptual import VGGPerceptualLoss
from framework.losses.segmentation import OHEM, BCEWithLogitsLoss, CombinedLoss, CrossEntropyLoss, DiceLoss

__all__ = ["CrossEntropyLoss", "OHEM", "BCEWithLogitsLoss", "DiceLoss", "FocalLoss", "TverskyLoss", "LovaszLoss",
           "CombinedLoss", "GANLoss", "GAN_LOSS_TYPES", "gradient_penalty", "r1_penalty", "FeatureMatchingLoss",
           "VGGPerceptualLoss"]

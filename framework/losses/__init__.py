"""Losses. Importing this package registers them in LOSSES."""

from framework.losses import feature_matching, gan, hard_pixels, perceptual, segmentation  # noqa: F401
from framework.losses.feature_matching import FeatureMatchingLoss
from framework.losses.gan import (
                                  GAN_LOSS_TYPES,
                                  AdversarialLoss,
                                  HingeGANLoss,
                                  LSGANLoss,
                                  VanillaGANLoss,
                                  WGANGPLoss,
                                  adversarial_loss,
                                  gradient_penalty,
                                  r1_penalty,
)
from framework.losses.hard_pixels import FocalLoss, LovaszLoss, TverskyLoss
from framework.losses.perceptual import VGGPerceptualLoss
from framework.losses.segmentation import OHEM, BCEWithLogitsLoss, CombinedLoss, CrossEntropyLoss, DiceLoss

__all__ = ["CrossEntropyLoss", "OHEM", "BCEWithLogitsLoss", "DiceLoss", "FocalLoss", "TverskyLoss", "LovaszLoss",
           "CombinedLoss", "AdversarialLoss", "VanillaGANLoss", "LSGANLoss", "HingeGANLoss", "WGANGPLoss",
           "adversarial_loss", "GAN_LOSS_TYPES", "gradient_penalty", "r1_penalty", "FeatureMatchingLoss",
           "VGGPerceptualLoss"]

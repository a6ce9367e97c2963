"""Losses. Importing this package registers them in LOSSES.

Owns: segmentation losses (`cross_entropy.py`: CrossEntropyLoss with OHEM; `segmentation.py`:
BCE, Dice, CombinedLoss; `hard_pixels.py`: focal, Tversky, Lovasz; `pixel_base.py`: what they
share), adversarial losses and penalties (`gan.py`), OASIS's per-pixel losses and LabelMix (`oasis.py`),
MSGAN's mode-seeking term (`mode_seeking.py`), feature matching and the VGG perceptual loss.
May import: errors, registry, dist, serialization (the VGG weights file), models (label maps resized
as the SPADE generator resizes them).
"""

from framework.losses import (  # noqa: F401
    cross_entropy,
    feature_matching,
    gan,
    hard_pixels,
    mode_seeking,
    oasis,
    perceptual,
    segmentation,
)
from framework.losses.cross_entropy import OHEM, CrossEntropyLoss
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
from framework.losses.segmentation import BCEWithLogitsLoss, CombinedLoss, DiceLoss

__all__ = ["CrossEntropyLoss", "OHEM", "BCEWithLogitsLoss", "DiceLoss", "FocalLoss", "TverskyLoss", "LovaszLoss",
           "CombinedLoss", "AdversarialLoss", "VanillaGANLoss", "LSGANLoss", "HingeGANLoss", "WGANGPLoss",
           "adversarial_loss", "GAN_LOSS_TYPES", "gradient_penalty", "r1_penalty", "FeatureMatchingLoss",
           "VGGPerceptualLoss"]

"""Segmenters made of an encoder (framework/models/encoders) and a decoder; registered in MODELS.

Owns: `EncoderDecoder` (padding, crop back, upsampled logits, the optional auxiliary head) and the
decoders `EncoderUNet`, `FPN`, `DeepLabV3Plus`.
May import: registry; within models, encoders, layers and the auxiliary head.
"""

from framework.models.decoders.base import EncoderDecoder
from framework.models.decoders.deeplabv3plus import DeepLabV3Plus
from framework.models.decoders.fpn import FPN
from framework.models.decoders.unet import EncoderUNet

__all__ = ["FPN", "DeepLabV3Plus", "EncoderDecoder", "EncoderUNet"]

"""DeepLabV3+ (Chen et al., 2018): ASPP on the deepest map, upsampled to stride 4 and fused
with a 48-channel projection of the stride-4 map.

`head_style` picks the head's layout:
- "torchvision" (the default): torchvision's ASPP (dense 3x3 atrous branches, a 1x1 projection
  and Dropout(0.5)), two dense 3x3 fusion convs, no dropout before the classifier;
- "mmseg": MMSegmentation's DepthwiseSeparableASPPHead (framework/models/decoders/mmseg_deeplab.py:
  separable atrous branches, a dense 3x3 bottleneck and no dropout after it, separable fusion,
  Dropout2d(0.1) before the classifier) and, with `aux_loss_weight`, its FCN auxiliary head's
  Dropout2d. On resnet50 at output stride 8 with aux_loss_weight 0.4 this is mmseg's
  deeplabv3plus_r50b-d8 parameter for parameter (tests/data/fingerprints/deeplabv3plus_r50b_d8_cityscapes.json).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.aux_head import AuxHead
from framework.models.decoders.base import EncoderDecoder, first_at_stride
from framework.models.decoders.mmseg_deeplab import (
    SeparableASPP,
    init_like_conv_module,
    mmseg_classifier,
    separable_fuse,
)
from framework.models.encoders import Encoder
from framework.models.layers import ConvNormAct, build_norm
from framework.registry import MODELS

# Atrous rates by output stride: the paper's (6, 12, 18) at 16, scaled with the map's size.
# (mmseg's configs keep (12, 24, 36) at output stride 8: a recipe following them sets atrous_rates.)
DEFAULT_RATES = {8: (24, 48, 72), 16: (12, 24, 36), 32: (6, 12, 18)}
HEAD_STYLES = ("torchvision", "mmseg")


@MODELS.register()
class DeepLabV3Plus(EncoderDecoder):
    """`output_stride` 16 (or 8) replaces the encoder's last strides by dilation (ResNets);
    32 keeps any encoder as it is. ASPP's image-pooling branch has a BatchNorm on a 1 x 1 map:
    train with batch size >= 2."""

    def __init__(self, encoder: str | Encoder = "resnet50", num_classes: int = 2, in_channels: int = 3,
                 encoder_weights: str | None = None, adapt_in_channels: str = "zeros", output_stride: int = 32,
                 atrous_rates: Sequence[int] | None = None, aspp_channels: int = 256,
                 low_level_channels: int = 48, norm: str = "bn", encoder_depth: int | None = None, aux_loss_weight: float = 0.0,
                 aux_stage: int = -2, head_style: str = "torchvision"):
        if head_style not in HEAD_STYLES:
            raise ValueError(f"head_style must be one of {', '.join(HEAD_STYLES)}, got {head_style!r}")
        super().__init__(encoder, num_classes, in_channels, encoder_weights, adapt_in_channels, output_stride,
                         encoder_depth=encoder_depth, aux_loss_weight=aux_loss_weight, aux_stage=aux_stage)
        self.head_style = head_style
        rates = tuple(atrous_rates or DEFAULT_RATES.get(self.encoder.strides[-1], DEFAULT_RATES[16]))
        self.low_level = first_at_stride(self.encoder, 4)
        self.project = nn.Sequential(
            nn.Conv2d(self.encoder.channels[self.low_level], low_level_channels, 1, bias=norm == "none"),
            build_norm(norm, low_level_channels), nn.ReLU(inplace=True))
        if head_style == "mmseg":
            self.aspp = SeparableASPP(self.encoder.channels[-1], rates, aspp_channels, norm)
            self.fuse = separable_fuse(aspp_channels, low_level_channels, norm)
            self.head = mmseg_classifier(aspp_channels, num_classes)
            init_like_conv_module(self.aspp, self.project, self.fuse)
            if self.aux_loss_weight:
                self.aux_head = AuxHead(self.encoder.channels[aux_stage], num_classes, mmseg=True)
                init_like_conv_module(self.aux_head[0])
            return
        from torchvision.models.segmentation.deeplabv3 import ASPP  # torchvision only when built

        self.aspp = ASPP(self.encoder.channels[-1], list(rates), aspp_channels)
        self.fuse = nn.Sequential(ConvNormAct(aspp_channels + low_level_channels, aspp_channels, norm),
                                  ConvNormAct(aspp_channels, aspp_channels, norm))
        self.head = nn.Conv2d(aspp_channels, num_classes, kernel_size=1)

    def decode(self, features: list[torch.Tensor]) -> torch.Tensor:
        low = self.project(features[self.low_level])
        context = F.interpolate(self.aspp(features[-1]), size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.fuse(torch.cat([context, low], dim=1))

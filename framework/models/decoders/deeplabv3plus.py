"""DeepLabV3+ (Chen et al., 2018): ASPP on the deepest map, upsampled to stride 4 and fused
with a 48-channel projection of the stride-4 map. The ASPP module is torchvision's."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.decoders.base import EncoderDecoder, first_at_stride
from framework.models.encoders import Encoder
from framework.models.layers import ConvNormAct, build_norm
from framework.registry import MODELS

# Atrous rates by output stride: the paper's (6, 12, 18) at 16, scaled with the map's size.
DEFAULT_RATES = {8: (24, 48, 72), 16: (12, 24, 36), 32: (6, 12, 18)}


@MODELS.register()
class DeepLabV3Plus(EncoderDecoder):
    """`output_stride` 16 (or 8) replaces the encoder's last strides by dilation (ResNets);
    32 keeps any encoder as it is. ASPP's image-pooling branch has a BatchNorm on a 1 x 1 map:
    train with batch size >= 2."""

    def __init__(self, encoder: str | Encoder = "resnet50", num_classes: int = 2, in_channels: int = 3,
                 encoder_weights: str | None = None, adapt_in_channels: str = "zeros", output_stride: int = 32,
                 atrous_rates: Sequence[int] | None = None, aspp_channels: int = 256,
                 low_level_channels: int = 48, norm: str = "bn", encoder_depth: int | None = None, aux_loss_weight: float = 0.0,
                 aux_stage: int = -2):
        super().__init__(encoder, num_classes, in_channels, encoder_weights, adapt_in_channels, output_stride,
                         encoder_depth=encoder_depth, aux_loss_weight=aux_loss_weight, aux_stage=aux_stage)
        rates = tuple(atrous_rates or DEFAULT_RATES.get(self.encoder.strides[-1], DEFAULT_RATES[16]))
        from torchvision.models.segmentation.deeplabv3 import ASPP  # torchvision only when built

        self.aspp = ASPP(self.encoder.channels[-1], list(rates), aspp_channels)
        self.low_level = first_at_stride(self.encoder, 4)
        self.project = nn.Sequential(
            nn.Conv2d(self.encoder.channels[self.low_level], low_level_channels, 1, bias=norm == "none"),
            build_norm(norm, low_level_channels), nn.ReLU(inplace=True))
        self.fuse = nn.Sequential(ConvNormAct(aspp_channels + low_level_channels, aspp_channels, norm),
                                  ConvNormAct(aspp_channels, aspp_channels, norm))
        self.head = nn.Conv2d(aspp_channels, num_classes, kernel_size=1)

    def decode(self, features: list[torch.Tensor]) -> torch.Tensor:
        low = self.project(features[self.low_level])
        context = F.interpolate(self.aspp(features[-1]), size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.fuse(torch.cat([context, low], dim=1))

"""Feature Pyramid Network for segmentation (Kirillov et al., Panoptic FPN; as
segmentation_models_pytorch's FPN): a top-down pyramid over strides 4..32, each level brought
to stride 4 and summed, logits upsampled to the input."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.decoders.base import EncoderDecoder, first_at_stride
from framework.models.encoders import Encoder
from framework.models.layers import ConvNormAct
from framework.registry import MODELS


@MODELS.register()
class FPN(EncoderDecoder):
    """Lateral 1x1 convs + nearest top-down sums give `pyramid_channels` maps; a conv-norm-ReLU
    per level to `segmentation_channels`, bilinear to stride 4, summed, dropout, 1x1 head.
    GroupNorm by default in the segmentation branch, as in the paper and smp."""

    def __init__(self, encoder: str | Encoder = "resnet34", num_classes: int = 2, in_channels: int = 3,
                 encoder_weights: str | None = None, adapt_in_channels: str = "zeros",
                 pyramid_channels: int = 256, segmentation_channels: int = 128, norm: str = "gn",
                 dropout: float = 0.2, encoder_depth: int | None = None, aux_loss_weight: float = 0.0,
                 aux_stage: int = -2):
        super().__init__(encoder, num_classes, in_channels, encoder_weights, adapt_in_channels,
                         encoder_depth=encoder_depth, aux_loss_weight=aux_loss_weight, aux_stage=aux_stage)
        self.first_level = first_at_stride(self.encoder, 4)
        channels = self.encoder.channels[self.first_level:]
        self.laterals = nn.ModuleList(nn.Conv2d(c, pyramid_channels, kernel_size=1) for c in channels)
        self.smooth = nn.ModuleList(ConvNormAct(pyramid_channels, segmentation_channels, norm) for _ in channels)
        self.dropout = nn.Dropout2d(dropout)
        self.head = nn.Conv2d(segmentation_channels, num_classes, kernel_size=1)

    def decode(self, features: list[torch.Tensor]) -> torch.Tensor:
        levels = features[self.first_level:]
        pyramid = [self.laterals[-1](levels[-1])]
        for lateral, feature in zip(reversed(self.laterals[:-1]), reversed(levels[:-1])):
            top = F.interpolate(pyramid[0], size=feature.shape[-2:], mode="nearest")
            pyramid.insert(0, lateral(feature) + top)
        size = pyramid[0].shape[-2:]
        merged = sum(F.interpolate(smooth(p), size=size, mode="bilinear", align_corners=False)
                     for smooth, p in zip(self.smooth, pyramid))
        return self.dropout(merged)

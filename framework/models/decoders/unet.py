"""U-Net decoder on a pretrained encoder (as segmentation_models_pytorch's Unet): a skip
connection from every encoder stride, nearest upsampling, two conv-norm-ReLU per block."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.decoders.base import EncoderDecoder
from framework.models.encoders import Encoder
from framework.models.layers import ConvNormAct
from framework.registry import MODELS


class UNetBlock(nn.Module):
    """Upsample to the skip's size (or `size`), concatenate the skip, two conv-norm-ReLU."""

    def __init__(self, in_channels: int, skip_channels: int, out_channels: int, norm: str):
        super().__init__()
        self.convs = nn.Sequential(ConvNormAct(in_channels + skip_channels, out_channels, norm),
                                   ConvNormAct(out_channels, out_channels, norm))

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None = None, size=None) -> torch.Tensor:
        x = F.interpolate(x, size=skip.shape[-2:] if skip is not None else size, mode="nearest")
        if skip is not None:
            x = torch.cat([x, skip], dim=1)
        return self.convs(x)


@MODELS.register()
class EncoderUNet(EncoderDecoder):
    """Blocks from the deepest map up through every shallower one; when the shallowest map is
    not at full resolution (stride 2 for ResNets), a last block without skip reaches it.
    `decoder_channels` gives the blocks' widths, deepest first (as many as used are taken)."""

    def __init__(self, encoder: str | Encoder = "resnet34", num_classes: int = 2, in_channels: int = 3,
                 encoder_weights: str | None = None, adapt_in_channels: str = "zeros",
                 decoder_channels: Sequence[int] = (256, 128, 64, 32, 16), norm: str = "bn",
                 encoder_depth: int | None = None, aux_loss_weight: float = 0.0,
                 aux_stage: int = -2):
        super().__init__(encoder, num_classes, in_channels, encoder_weights, adapt_in_channels,
                         encoder_depth=encoder_depth, aux_loss_weight=aux_loss_weight, aux_stage=aux_stage)
        skips = list(reversed(self.encoder.channels[:-1]))
        self.full_resolution_block = self.encoder.strides[0] > 1
        blocks = len(skips) + self.full_resolution_block
        if len(decoder_channels) < blocks:
            raise ValueError(f"decoder_channels needs {blocks} widths for encoder "
                             f"strides {self.encoder.strides}, got {list(decoder_channels)}")
        widths = list(decoder_channels[:blocks])
        inputs = [self.encoder.channels[-1]] + widths[:-1]
        self.blocks = nn.ModuleList(UNetBlock(i, s, o, norm) for i, s, o in zip(inputs, skips + [0], widths))
        self.head = nn.Conv2d(widths[-1], num_classes, kernel_size=3, padding=1)

    def decode(self, features: list[torch.Tensor]) -> torch.Tensor:
        skips = list(reversed(features[:-1]))
        x = features[-1]
        for i, block in enumerate(self.blocks):
            if i < len(skips):
                x = block(x, skips[i])
            else:  # full resolution: stride 1 of the padded input
                x = block(x, size=[d * self.encoder.strides[0] for d in features[0].shape[-2:]])
        return x

"""OASIS's discriminator (Schönfeld et al., 2021): a residual U-Net that segments an image into
the classes plus one "fake" class, the segmenter discriminator of `gan_loss: oasis`.

Encoder: one residual block per width (OASIS: 128, 128, 256, 256, 512, 512), each halving the
side by 2x2 average pooling. Decoder: residual blocks that double the side (nearest), the first
from the bottleneck, each later one from the previous output concatenated with the encoder's
output of the same size, the last to `last_width` (64) channels; a 1x1 conv gives the logits,
N x num_classes x H x W at the input's size. Spectral norm on every conv of the blocks, as OASIS
(its 1x1 head stays plain). Input sides must be multiples of 2**len(widths).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.spectral_norm import apply_spectral_norm
from framework.registry import MODELS

OASIS_WIDTHS = (128, 128, 256, 256, 512, 512)


class ResidualResampleBlock(nn.Module):
    """Two 3x3 convs (LeakyReLU 0.2 before each, none before the first of the network's first
    block) with a 1x1 shortcut conv where the width changes. `resample` -1: average-pooled by 2
    after the convs (and in the shortcut: before its conv in the first block, after it elsewhere,
    as OASIS); +1: upsampled by 2 (nearest) before the first conv and before the shortcut conv."""

    def __init__(self, in_channels: int, out_channels: int, resample: int, first: bool = False):
        super().__init__()
        self.resample, self.first = resample, first
        self.conv_1 = nn.Conv2d(in_channels, out_channels, 3, 1, 1)
        self.conv_2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1)
        self.conv_s = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.resample > 0:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
        elif self.first:
            x = F.avg_pool2d(x, 2)  # pooling a 3-channel image first is cheaper, as OASIS does
        if self.conv_s is not None:
            x = self.conv_s(x)
        if self.resample < 0 and not self.first:
            x = F.avg_pool2d(x, 2)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dx = x if self.first else F.leaky_relu(x, 0.2)
        if self.resample > 0:
            dx = F.interpolate(dx, scale_factor=2, mode="nearest")
        dx = self.conv_2(F.leaky_relu(self.conv_1(dx), 0.2))
        if self.resample < 0:
            dx = F.avg_pool2d(dx, 2)
        return self.shortcut(x) + dx


@MODELS.register()
class OASISDiscriminator(nn.Module):
    """OASIS's residual U-Net discriminator: image N x in_channels x H x W -> logits N x
    num_classes x H x W. `num_classes` is what it outputs per pixel: the task's classes + 1 for
    `gan_loss: oasis` (OASIS's own code counts its don't-care channel too: 152 for ADE20K)."""

    def __init__(self, num_classes: int, in_channels: int = 3, widths: Sequence[int] = OASIS_WIDTHS,
                 last_width: int = 64, spectral_norm: bool = True):
        super().__init__()
        widths = [int(w) for w in widths]
        if len(widths) < 2 or min(widths) < 1:
            raise ValueError(f"widths must list at least two positive widths, got {widths}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.num_classes = num_classes  # its outputs per pixel, as a segmenter declares
        self.size_divisor = 2 ** len(widths)
        inputs = [in_channels, *widths]
        self.down = nn.ModuleList(ResidualResampleBlock(inputs[i], widths[i], -1, first=i == 0)
                                  for i in range(len(widths)))
        # up block i sees the previous output with the encoder's output of its size (2x the width),
        # except the first, fed by the bottleneck alone; the last ends at last_width
        ins = [widths[-1]] + [2 * w for w in reversed(widths[1:-1])] + [2 * widths[0]]
        outs = list(reversed(widths[:-1])) + [last_width]
        self.up = nn.ModuleList(ResidualResampleBlock(i, o, +1) for i, o in zip(ins, outs))
        if spectral_norm:
            apply_spectral_norm(nn.ModuleList([*self.down, *self.up]))
        self.head = nn.Conv2d(last_width, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        if height % self.size_divisor or width % self.size_divisor:
            raise ValueError(f"OASISDiscriminator with {len(self.down)} levels needs image sides that are "
                             f"multiples of {self.size_divisor}, got {height}x{width}; resize or crop the images")
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        skips.pop()  # the bottleneck feeds the first up block alone
        x = self.up[0](x)
        for block in self.up[1:]:
            x = block(torch.cat([skips.pop(), x], dim=1))
        return self.head(x)

"""U-Net (Ronneberger et al., 2015) with a configurable depth, width, norm and upsampling."""

from __future__ import annotations

import torch
from torch import nn

from framework.models.layers import ConvNormAct, build_norm
from framework.registry import MODELS

UPSAMPLE_MODES = ("bilinear", "transpose")


class DoubleConv(nn.Sequential):
    def __init__(self, in_channels: int, out_channels: int, norm: str):
        super().__init__(ConvNormAct(in_channels, out_channels, norm), ConvNormAct(out_channels, out_channels, norm))


class Up(nn.Module):
    """Doubles the resolution and halves the channels, then fuses the skip connection.

    Both modes end with the same channel count, so they are interchangeable: "transpose" learns
    the upsampling, "bilinear" interpolates and mixes channels with a cheap 1x1 conv.
    """

    def __init__(self, in_channels: int, out_channels: int, norm: str, mode: str):
        super().__init__()
        if mode == "transpose":
            self.upsample = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=2, stride=2)
        else:
            self.upsample = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                nn.Conv2d(in_channels, out_channels, kernel_size=1),
            )
        self.fuse = DoubleConv(2 * out_channels, out_channels, norm)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.fuse(torch.cat([self.upsample(x), skip], dim=1))


@MODELS.register()
class UNet(nn.Module):
    """U-Net returning logits N x num_classes x H x W at the input's resolution.

    Level i of the encoder has base_channels * 2**i channels, for i = 0..depth. The input's
    height and width must be divisible by 2**depth (forward raises a ValueError otherwise):
    padding silently would change what the network sees at the borders, so sizing the
    input is left to the data pipeline (resize, crop or pad there).
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 2,
        base_channels: int = 32,
        depth: int = 4,
        norm: str = "bn",
        upsample: str = "bilinear",
    ):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if upsample not in UPSAMPLE_MODES:
            raise ValueError(f"unknown upsample {upsample!r}; choose one of {', '.join(map(repr, UPSAMPLE_MODES))}")
        build_norm(norm, base_channels)  # reject a bad norm name here, not deep inside the blocks
        self.depth, self.num_classes = depth, num_classes  # num_classes: its outputs per pixel, as a segmenter declares
        widths = [base_channels * 2**i for i in range(depth + 1)]

        self.stem = DoubleConv(in_channels, widths[0], norm)
        self.down = nn.ModuleList(
            nn.Sequential(nn.MaxPool2d(2), DoubleConv(widths[i], widths[i + 1], norm)) for i in range(depth)
        )
        self.up = nn.ModuleList(Up(widths[i + 1], widths[i], norm, upsample) for i in reversed(range(depth)))
        self.head = nn.Conv2d(widths[0], num_classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        multiple = 2**self.depth
        height, width = x.shape[-2:]
        if height % multiple or width % multiple:
            raise ValueError(
                f"UNet with depth={self.depth} needs an input height and width divisible by "
                f"2**{self.depth} = {multiple}, got {height}x{width}; resize, crop or pad the images"
            )
        skips = [self.stem(x)]
        for down in self.down:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.up:
            x = up(x, skips.pop())
        return self.head(x)

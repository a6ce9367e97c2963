"""DCGAN networks (Radford et al., 2016) for square images of 2^k pixels (32, 64, 128, ...).

The generator maps N x latent_dim x 1 x 1 noise to N x C x S x S images in [-1, 1]; the
discriminator maps images to N x 1 x 1 x 1 logits.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from framework.models import build_norm, init_gan_weights_
from framework.registry import MODELS


def _stages(image_size: int) -> int:
    """Stride-2 stages between 4x4 and image_size x image_size."""
    stages = math.log2(image_size / 4) if image_size >= 8 else -1
    if stages != int(stages) or stages < 1:
        raise ValueError(f"image_size must be a power of two >= 8, got {image_size}")
    return int(stages)


@MODELS.register()
class DCGANGenerator(nn.Module):
    """Noise -> 4x4 by a transposed conv, then stride-2 transposed convs halving the width up
    to image_size; batch norm and ReLU between, tanh at the end."""

    def __init__(self, latent_dim: int = 100, out_channels: int = 3, base_channels: int = 64, image_size: int = 64):
        super().__init__()
        stages = _stages(image_size)
        width = base_channels * 2 ** (stages - 1)
        layers: list[nn.Module] = [nn.ConvTranspose2d(latent_dim, width, 4, 1, 0, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU(inplace=True)]
        for _ in range(stages - 1):
            layers += [nn.ConvTranspose2d(width, width // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(width // 2),
                       nn.ReLU(inplace=True)]
            width //= 2
        layers += [nn.ConvTranspose2d(width, out_channels, 4, 2, 1), nn.Tanh()]
        self.body = nn.Sequential(*layers)
        init_gan_weights_(self)

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return self.body(noise)


@MODELS.register()
class DCGANDiscriminator(nn.Module):
    """Stride-2 convs doubling the width down to 4x4 (LeakyReLU 0.2, `norm` after the first:
    batch norm by default; "none" for spectral norm or R1, as SNGAN), then a 4x4 conv to one logit."""

    def __init__(self, in_channels: int = 3, base_channels: int = 64, image_size: int = 64, norm: str = "bn"):
        super().__init__()
        stages = _stages(image_size)
        layers: list[nn.Module] = [nn.Conv2d(in_channels, base_channels, 4, 2, 1), nn.LeakyReLU(0.2, inplace=True)]
        width = base_channels
        for _ in range(stages - 1):
            layers += [nn.Conv2d(width, 2 * width, 4, 2, 1, bias=norm != "bn"), build_norm(norm, 2 * width),
                       nn.LeakyReLU(0.2, inplace=True)]
            width *= 2
        layers.append(nn.Conv2d(width, 1, 4, 1, 0))
        self.body = nn.Sequential(*layers)
        init_gan_weights_(self)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images)

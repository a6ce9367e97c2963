"""Discriminators that return more than logits: the multi-scale PatchGAN of pix2pixHD.

`MultiScaleDiscriminator` runs `num_scales` PatchGANs of the same shape on the image at full
size, at 1/2, 1/4, ... (3x3 average pooling with stride 2 between scales, as pix2pixHD). Its
forward returns a `DiscriminatorOutput`: each scale's logit map, and each scale's
intermediate feature maps (what the feature-matching loss compares). The GAN losses
(framework/losses/gan.py) accept such an output wherever they accept a logit tensor and
average over the scales.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from framework.models.layers import build_norm, init_gan_weights_
from framework.models.spectral_norm import apply_spectral_norm
from framework.registry import MODELS


class DiscriminatorOutput(NamedTuple):
    """logits[s]: the logit map at scale s (full size first); features[s]: the activations
    after each block of scale s, shallow to deep, the logits excluded. A NamedTuple of lists
    of tensors, which DDP's output traversal understands."""

    logits: list[torch.Tensor]
    features: list[list[torch.Tensor]]


# SPADE's discriminator norm: spectral norm on the inner convs (no bias: the norm removes it)
# followed by an affine-free instance norm; the first and the last conv stay plain.
SPECTRAL_INSTANCE = "spectralinstance"


class FeaturePatchGAN(nn.Module):
    """A PatchGAN (pix2pix's: a 4x4 stride-2 conv, `num_layers - 1` more with norm, one
    stride-1, a 4x4 conv to one logit per patch) that also returns each block's output."""

    def __init__(self, in_channels: int, base_channels: int, num_layers: int, norm: str, padding: int = 1):
        super().__init__()
        widths = [base_channels * min(2**level, 8) for level in range(num_layers + 1)]
        blocks = [nn.Sequential(nn.Conv2d(in_channels, widths[0], 4, 2, padding), nn.LeakyReLU(0.2, inplace=True))]
        inner_norm = "in" if norm == SPECTRAL_INSTANCE else norm
        biased = norm not in ("bn", SPECTRAL_INSTANCE)
        for level in range(1, num_layers + 1):
            stride = 2 if level < num_layers else 1
            blocks.append(nn.Sequential(nn.Conv2d(widths[level - 1], widths[level], 4, stride, padding, bias=biased),
                                        build_norm(inner_norm, widths[level]), nn.LeakyReLU(0.2, inplace=True)))
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Conv2d(widths[num_layers], 1, 4, 1, padding)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        features = []
        for block in self.blocks:
            x = block(x)
            features.append(x)
        return self.head(x), features


@MODELS.register()
class MultiScaleDiscriminator(nn.Module):
    """pix2pixHD's discriminator: `num_scales` PatchGANs, scale s seeing the image downsampled
    by 2^s. `in_channels` is 6 for a conditional GAN (input and image), 3 for an
    unconditional one; `num_layers` per PatchGAN (3: 70x70 patches at full size); `norm` as
    in framework/models/layers.py (`none` for spectral norm or R1 without batch statistics), or
    `spectralinstance`; `padding` of every 4x4 conv (pix2pixHD's 1, SPADE's 2).

    SPADE's discriminator: `norm: spectralinstance, padding: 2, num_layers: 3, num_scales: 2`
    (SPADE's n_layers_D 4 counts the first conv, which `num_layers` does not). The
    `spectral_norm: true` key adds it to the first and last conv (each conv is normalised once)."""

    def __init__(self, in_channels: int = 6, num_scales: int = 3, base_channels: int = 64, num_layers: int = 3,
                 norm: str = "in", padding: int = 1):
        super().__init__()
        if not isinstance(num_scales, int) or num_scales < 1:
            raise ValueError(f"num_scales must be a positive integer, got {num_scales!r}")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        if padding not in (1, 2):
            raise ValueError(f"padding must be 1 (pix2pixHD) or 2 (SPADE), got {padding!r}")
        self.scales = nn.ModuleList(FeaturePatchGAN(in_channels, base_channels, num_layers, norm, padding)
                                    for _ in range(num_scales))
        self.downsample = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.min_side = min_image_side(num_layers, num_scales, padding)
        init_gan_weights_(self)
        if norm == SPECTRAL_INSTANCE:  # after the init: the parametrisation starts from the drawn weights
            for patch_gan in self.scales:
                for block in patch_gan.blocks[1:]:
                    apply_spectral_norm(block[0])

    def forward(self, x: torch.Tensor) -> DiscriminatorOutput:
        if x.shape[-2] < self.min_side or x.shape[-1] < self.min_side:  # python ints: no device sync
            raise ValueError(self.too_small(x.shape[-2], x.shape[-1]))
        logits, features = [], []
        for index, patch_gan in enumerate(self.scales):
            if index:
                x = self.downsample(x)
            scale_logits, scale_features = patch_gan(x)
            logits.append(scale_logits)
            features.append(scale_features)
        return DiscriminatorOutput(logits, features)

    def too_small(self, height: int, width: int) -> str:
        scales, layers = len(self.scales), len(self.scales[0].blocks) - 1
        return (f"MultiScaleDiscriminator: images of {height}x{width} are too small for num_scales {scales} x "
                f"num_layers {layers}: it needs at least {self.min_side} pixels a side; lower num_scales or "
                "num_layers, or train on larger images")


def min_image_side(num_layers: int, num_scales: int, padding: int = 1) -> int:
    """The smallest image side every scale's PatchGAN can judge. With padding 1, a PatchGAN's
    `num_layers` stride-2 convs (4x4) take a side s to floor(s / 2^num_layers); the stride-1 conv
    and the head (4x4) each take 1 off, and the head needs an input of 2 (its padded 4): so
    floor(s / 2^num_layers) >= 3, which also leaves the last norm more than one value. With
    padding 2 (SPADE's) each stride-2 conv gives floor(s / 2) + 1 and the stride-1 ones add 1, so
    any side works but the last norm needs more than one value: a side of 2. Each further scale
    sees ceil(s / 2) (3x3 pooling, stride 2, padding 1), so needs 2 x its side - 1."""
    side = 3 * 2**num_layers if padding == 1 else 2
    for _ in range(num_scales - 1):
        side = 2 * side - 1
    return side

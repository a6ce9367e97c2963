"""A trained GAN's generator on new inputs: the EMA generator when the task keeps one.

Conditional (pix2pix): uint8 RGB images of any size -> generated images of the same size
(padded to the generator's size divisor and cropped back, as for segmentation).
Unconditional (DCGAN): images from noise drawn per sample with a seed, so a seed and an index name an image.
"""

from __future__ import annotations

import torch
from torch import nn

from framework.inference.noise import item_noise
from framework.inference.segmentation import pad_to_multiple
from framework.inference.settings import network_size_divisor


def to_signed(image: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] -> float [-1, 1] (what generators take and make); float64 stays float64."""
    return (image if image.dtype == torch.float64 else image.float()) / 127.5 - 1


def to_unit(image: torch.Tensor) -> torch.Tensor:
    """float [-1, 1] -> float [0, 1], clamped."""
    return ((image + 1) / 2).clamp(0, 1)


class GeneratorPredictor:
    def __init__(self, generator: nn.Module, noise_shape: tuple[int, ...] | None = None):
        """`generator`: what a GAN task's `generator_for` gives; `noise_shape`: one sample's noise
        (latent_dim, 1, 1) for a generator from noise (its task's `noise_shape`), else None."""
        self.generator = generator
        self.noise_shape = noise_shape
        self.size_divisor = network_size_divisor(generator)

    @torch.no_grad()
    def translate(self, images: torch.Tensor) -> torch.Tensor:
        """N x 3 x H x W uint8 -> N x C x H x W float images in [0, 1]."""
        return to_unit(self.signed_output(images))

    def signed_output(self, images: torch.Tensor) -> torch.Tensor:
        """N x 3 x H x W pixels (uint8, or floats on the 0..255 scale) -> the generator's output in
        [-1, 1] at their size, float32 (float64 for float64 pixels); the autograd graph is kept."""
        height, width = images.shape[-2:]
        fake = self.generator(pad_to_multiple(to_signed(images), self.size_divisor))[..., :height, :width]
        return fake if fake.dtype == torch.float64 else fake.float()

    def noise(self, count: int, seed: int, device: torch.device, first: int = 0) -> torch.Tensor:
        """The noise of samples first .. first + count - 1: sample i's from (seed, i) alone
        (framework/inference/noise.py), so a seed names each image at any batch size or count."""
        return item_noise(self.noise_shape, seed, 0, range(first, first + count)).to(device)

    @torch.no_grad()
    def sample(self, noise: torch.Tensor) -> torch.Tensor:
        """N x latent_dim x 1 x 1 noise -> N x C x H x W float images in [0, 1]."""
        return to_unit(self.generator(noise).float())

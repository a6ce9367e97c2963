"""The mode-seeking term (Mao et al., 2019, "Mode Seeking Generative Adversarial Networks for
Diverse Image Synthesis", MSGAN): a conditional generator learns to ignore its noise (one label
map, one image, whatever the noise), and nothing in the adversarial loss asks otherwise. MSGAN
draws each input twice, with noises z1 and z2, and maximises

    ratio = mean |G(x, z1) - G(x, z2)| / mean |z1 - z2|

by minimising 1 / (ratio + eps), so that images move apart as much as their noises do.

`mode_seeking_loss` takes the ratio per input (the means over each image's pixels and each
noise vector's entries) and averages 1 / (ratio + eps) over the batch: a collapsed input
(ratio near 0) pulls hardest. Computed in float32 whatever the images' dtype (under bfloat16
two close images differ by rounding alone).
"""

from __future__ import annotations

import torch

EPS = 1e-5  # MSGAN's


def mode_seeking_loss(first: torch.Tensor, second: torch.Tensor, first_noise: torch.Tensor,
                      second_noise: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """first, second: N x ... images of the same N inputs; first_noise, second_noise: N x ... their noises."""
    image_spread = (first.float() - second.float()).abs().flatten(1).mean(1)
    noise_spread = (first_noise.float() - second_noise.float()).abs().flatten(1).mean(1)
    return (1 / (image_spread / noise_spread + eps)).mean()

"""Feature matching (pix2pixHD, Wang et al., 2018): the generator matches the discriminator's
intermediate features on its fake to those on the real image.

    loss = weight * sum over scales s and layers l of  (4 / L) * (1 / S) * mean |D_s,l(fake) - D_s,l(real)|

with S scales and L feature maps per scale (pix2pixHD's 4 / (n_layers_D + 1) and 1 / num_D).
The real features are targets (detached). The task computes both outputs through the frozen
discriminator, as for the adversarial term. Needs a discriminator whose output has
`.features` (MultiScaleDiscriminator).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from framework.registry import LOSSES


def discriminator_features(output, role: str) -> list[list[torch.Tensor]]:
    features = getattr(output, "features", None)
    if features is None:
        raise ValueError(f"feature matching needs the discriminator's intermediate features, but its output on the "
                         f"{role} images is a {type(output).__name__}: use a discriminator that returns them "
                         "(MultiScaleDiscriminator)")
    return features


@LOSSES.register()
class FeatureMatchingLoss(nn.Module):
    """`weight` (pix2pixHD's lambda_feat: 10) x the L1 distance between D's features on fake
    and on real images, weighted per scale and layer as pix2pixHD does."""

    def __init__(self, weight: float = 10.0):
        super().__init__()
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight}")
        self.weight = weight

    def forward(self, fake_output, real_output) -> torch.Tensor:
        fake_scales = discriminator_features(fake_output, "fake")
        real_scales = discriminator_features(real_output, "real")
        total = fake_scales[0][0].new_zeros((), dtype=torch.float32)
        for fake_layers, real_layers in zip(fake_scales, real_scales, strict=True):
            layer_weight = 4.0 / len(fake_layers) / len(fake_scales)
            for fake, real in zip(fake_layers, real_layers, strict=True):
                total = total + layer_weight * F.l1_loss(fake.float(), real.detach().float())
        return self.weight * total

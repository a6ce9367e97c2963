"""Near-zero-compute networks for the fixed-cost benchmark (`custom_imports: [benchmarks.helpers.tiny_nets]`):
a 1x1 conv segmenter and a one-layer generator and discriminator, so what is left of a step's
time is what the training loop itself costs."""

import torch
from torch import nn

from framework.registry import MODELS


@MODELS.register()
class TinySegmenter(nn.Conv2d):
    def __init__(self, num_classes: int = 4):
        super().__init__(3, num_classes, 1)


@MODELS.register()
class TinyGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x))


@MODELS.register()
class TinyDiscriminator(nn.Conv2d):
    def __init__(self):
        super().__init__(6, 1, 1)

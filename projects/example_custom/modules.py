"""A user's own network and loss, joined to the framework with decorators only.

The config lists this module in `custom_imports`, so it is imported (and these classes
registered) before anything is built; then `type: TinyFCN` / `type: SoftmaxFocalLoss` just work.
"""

import torch
import torch.nn.functional as F
from torch import nn

from framework.registry import LOSSES, MODELS


@MODELS.register()
class TinyFCN(nn.Module):
    """A fully convolutional net with dilated convs: full resolution, no down-sampling."""

    def __init__(self, in_channels: int = 3, num_classes: int = 2, width: int = 16, dilations=(1, 2, 4, 8)):
        super().__init__()
        layers, channels = [], in_channels
        for dilation in dilations:
            layers += [nn.Conv2d(channels, width, 3, padding=dilation, dilation=dilation, bias=False),
                       nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Conv2d(width, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@LOSSES.register()
class SoftmaxFocalLoss(nn.Module):
    """Cross-entropy down-weighting easy pixels by (1 - p_true)^gamma (Lin et al., 2017)."""

    name = "softmax_focal"

    def __init__(self, gamma: float = 2.0, ignore_index: int = 255):
        super().__init__()
        self.gamma = gamma
        self.ignore_index = ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        ce = F.cross_entropy(logits, target, ignore_index=self.ignore_index, reduction="none")
        p_true = torch.exp(-ce)
        valid = target != self.ignore_index
        return ((1 - p_true) ** self.gamma * ce)[valid].mean()

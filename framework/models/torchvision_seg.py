"""torchvision's DeepLabV3 and FCN, randomly initialised, returning plain logits.

Weights are never downloaded (`weights=None, weights_backbone=None`); start from pretrained
weights by loading a local file. The torchvision model is `self.net`, so `self.net.backbone`
holds the ResNet's layers (conv1 ... layer4, without avgpool/fc).
"""

from __future__ import annotations

import torch
from torch import nn

from framework.models.aux_head import LogitsWithAux, check_aux_loss_weight
from framework.registry import MODELS


class _TorchvisionSegmentation(nn.Module):
    """Wraps a torchvision segmentation model so that forward returns the `out` logits only.

    With aux_loss=True torchvision adds an auxiliary FCN head on the backbone's penultimate
    stage: in training mode forward then returns `LogitsWithAux` and the task adds its loss
    times `aux_loss_weight` (0.5, torchvision's reference recipe). In eval mode torchvision
    still runs it (a few % of the FLOPs); only `out` is returned.
    """

    # backbone -> name of the builder in torchvision.models.segmentation, imported when a network
    # is built (torchvision's import costs about a second, for every run that does not use it)
    builders: dict[str, str] = {}

    def __init__(self, num_classes: int, backbone: str, aux_loss: bool, aux_loss_weight: float):
        super().__init__()
        if backbone not in self.builders:
            raise ValueError(f"unknown backbone {backbone!r}; choose one of {', '.join(map(repr, self.builders))}")
        from torchvision.models import segmentation

        builder = getattr(segmentation, self.builders[backbone])
        self.net = builder(weights=None, weights_backbone=None, num_classes=num_classes, aux_loss=aux_loss)
        self.aux_loss_weight = check_aux_loss_weight(aux_loss_weight) if aux_loss else 0.0
        if aux_loss and not self.aux_loss_weight:  # a head that never gets a gradient: DDP refuses it
            raise ValueError("aux_loss: true needs aux_loss_weight > 0 (or aux_loss: false for no auxiliary head)")

    def forward(self, x: torch.Tensor) -> torch.Tensor | LogitsWithAux:
        if self.training and self.aux_loss_weight:
            out = self.net(x)
            return LogitsWithAux(out["out"], out["aux"])
        return self.net(x)["out"]


@MODELS.register()
class DeepLabV3(_TorchvisionSegmentation):
    """DeepLabV3: logits N x num_classes x H x W (output stride 8 for ResNets, 16 for MobileNetV3).

    The ASPP image-pooling branch has a BatchNorm on a 1 x 1 map: train with batch size >= 2.
    """

    builders = {
        "resnet50": "deeplabv3_resnet50",
        "resnet101": "deeplabv3_resnet101",
        "mobilenet_v3_large": "deeplabv3_mobilenet_v3_large",
    }

    def __init__(self, num_classes: int, backbone: str = "resnet50", aux_loss: bool = False,
                 aux_loss_weight: float = 0.5):
        super().__init__(num_classes, backbone, aux_loss, aux_loss_weight)


@MODELS.register()
class FCN(_TorchvisionSegmentation):
    """FCN (output stride 8): logits N x num_classes x H x W."""

    builders = {
        "resnet50": "fcn_resnet50",
        "resnet101": "fcn_resnet101",
    }

    def __init__(self, num_classes: int, backbone: str = "resnet50", aux_loss: bool = False,
                 aux_loss_weight: float = 0.5):
        super().__init__(num_classes, backbone, aux_loss, aux_loss_weight)

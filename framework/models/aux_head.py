"""An auxiliary segmentation head for training only (PSPNet's deep supervision, as in MMSegmentation
and torchvision's `aux_loss`).

A network built with an auxiliary head returns `LogitsWithAux` in training mode: its logits and
the auxiliary head's, both at the input size. The segmentation task adds the loss of the
auxiliary logits, times the network's `aux_loss_weight`, as the term `loss_aux`. In eval mode
(validation, tools/test.py, export) the network returns its logits only and the auxiliary head
does not run.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from framework.models.layers import build_norm


class LogitsWithAux(NamedTuple):
    logits: torch.Tensor
    aux_logits: torch.Tensor


class AuxHead(nn.Sequential):
    """torchvision's FCNHead: 3x3 conv to a quarter of the channels, norm, ReLU, dropout 0.1, 1x1 conv.
    `mmseg=True`: mmseg's FCNHead (num_convs 1, concat_input False) with the same shapes, whose
    dropout is Dropout2d (whole channels, its BaseDecodeHead) and whose classifier starts from
    N(0, 0.01) with bias 0 (its init_cfg)."""

    def __init__(self, in_channels: int, num_classes: int, norm: str = "bn", mmseg: bool = False):
        inner = max(in_channels // 4, 1)
        classifier = nn.Conv2d(inner, num_classes, 1)
        if mmseg:
            nn.init.normal_(classifier.weight, 0.0, 0.01)
            nn.init.zeros_(classifier.bias)
        super().__init__(nn.Conv2d(in_channels, inner, 3, padding=1, bias=norm == "none"), build_norm(norm, inner),
                         nn.ReLU(inplace=True), nn.Dropout2d(0.1) if mmseg else nn.Dropout(0.1), classifier)


def check_aux_loss_weight(weight) -> float:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
        raise ValueError(f"aux_loss_weight must be a number >= 0 (0: no auxiliary head), got {weight!r}")
    return float(weight)

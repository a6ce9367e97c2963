"""MMSegmentation's DeepLabV3+ head (DepthwiseSeparableASPPHead), built from this package's layers
for `DeepLabV3Plus(head_style="mmseg")`. Layer for layer, as mmseg's sep_aspp_head.py, aspp_head.py
and decode_head.py define it (open-mmlab/mmsegmentation, commit 0c87f7a for sep_aspp_head.py):

- ASPP: an image-pooling branch (global average, 1x1 conv-norm-ReLU, upsampled), a 1x1
  conv-norm-ReLU branch and, for each atrous rate, a depthwise-separable 3x3 branch (depthwise
  conv-norm-ReLU, then pointwise conv-norm-ReLU: mmcv's DepthwiseSeparableConvModule);
- a dense 3x3 conv-norm-ReLU bottleneck from the concatenated branches, with no dropout after it
  (torchvision's ASPP ends instead in a 1x1 projection and Dropout(0.5));
- fusion with the stride-4 map through two depthwise-separable 3x3 blocks;
- Dropout2d(0.1) before the 1x1 classifier, whose weights start from N(0, 0.01) and bias 0
  (mmseg's BaseDecodeHead init_cfg Normal std 0.01 on conv_seg);
- every other conv of the head as mmcv's ConvModule initialises it (`init_like_conv_module`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.layers import build_norm

MMSEG_DROPOUT = 0.1  # BaseDecodeHead's dropout_ratio, also the FCN auxiliary head's
MMSEG_CLASSIFIER_STD = 0.01  # BaseDecodeHead's init_cfg: Normal(std=0.01) on conv_seg


def conv_norm_act(cin: int, cout: int, kernel: int, norm: str, dilation: int = 1, groups: int = 1) -> list[nn.Module]:
    """mmcv's ConvModule with a norm: the conv has no bias where a norm follows."""
    return [nn.Conv2d(cin, cout, kernel, padding=dilation * (kernel // 2), dilation=dilation, groups=groups,
                      bias=norm == "none"), build_norm(norm, cout), nn.ReLU(inplace=True)]


def separable(cin: int, cout: int, norm: str, dilation: int = 1) -> nn.Sequential:
    """A depthwise 3x3 conv-norm-ReLU, then a pointwise 1x1 conv-norm-ReLU."""
    return nn.Sequential(*conv_norm_act(cin, cin, 3, norm, dilation, groups=cin), *conv_norm_act(cin, cout, 1, norm))


class SeparableASPP(nn.Module):
    def __init__(self, in_channels: int, rates: Sequence[int], channels: int, norm: str):
        super().__init__()
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), *conv_norm_act(in_channels, channels, 1, norm))
        self.branches = nn.ModuleList([nn.Sequential(*conv_norm_act(in_channels, channels, 1, norm))]
                                      + [separable(in_channels, channels, norm, rate) for rate in rates])
        self.bottleneck = nn.Sequential(*conv_norm_act((len(rates) + 2) * channels, channels, 3, norm))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False)
        return self.bottleneck(torch.cat([pooled] + [branch(x) for branch in self.branches], dim=1))


def separable_fuse(channels: int, low_level_channels: int, norm: str) -> nn.Sequential:
    return nn.Sequential(separable(channels + low_level_channels, channels, norm), separable(channels, channels, norm))


def mmseg_classifier(channels: int, num_classes: int) -> nn.Sequential:
    conv = nn.Conv2d(channels, num_classes, kernel_size=1)
    nn.init.normal_(conv.weight, 0.0, MMSEG_CLASSIFIER_STD)
    nn.init.zeros_(conv.bias)
    return nn.Sequential(nn.Dropout2d(MMSEG_DROPOUT), conv)


def init_like_conv_module(*modules: nn.Module) -> None:
    """mmcv's ConvModule.init_weights, in place: each conv Kaiming-normal for a ReLU with fan_out
    (its kaiming_init defaults), bias 0; norms already start at weight 1 and bias 0 in torch."""
    for module in modules:
        for conv in module.modules():
            if isinstance(conv, nn.Conv2d):
                nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
                if conv.bias is not None:
                    nn.init.zeros_(conv.bias)

"""Colours for class maps. The default palette is Pascal VOC's colormap, so VOC masks
look the way their palette PNGs do, and any number of classes gets distinct colours."""

from __future__ import annotations

import numpy as np
import torch


def default_palette(num_classes: int) -> np.ndarray:
    """num_classes x 3 uint8 RGB: the Pascal VOC bit-interleaving colormap."""
    palette = np.zeros((num_classes, 3), dtype=np.uint8)
    for label in range(num_classes):
        value, r, g, b = label, 0, 0, 0
        for shift in range(7, -1, -1):
            r |= ((value >> 0) & 1) << shift
            g |= ((value >> 1) & 1) << shift
            b |= ((value >> 2) & 1) << shift
            value >>= 3
        palette[label] = (r, g, b)
    return palette


def colorize(labels: torch.Tensor, palette: torch.Tensor, ignore_index: int | None = 255,
             ignore_color=(255, 255, 255)) -> torch.Tensor:
    """NxHxW (or HxW) class ids -> ...x3xHxW uint8 RGB; ignored pixels in `ignore_color`."""
    table = torch.cat([palette.to(labels.device, torch.uint8),
                       torch.tensor([ignore_color], dtype=torch.uint8, device=labels.device)])
    index = labels.clone()
    outside = (index < 0) | (index >= len(palette))
    if ignore_index is not None:
        outside |= labels == ignore_index
    index[outside] = len(palette)
    return table[index].movedim(-1, -3)

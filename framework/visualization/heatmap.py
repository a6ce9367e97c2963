"""Matrices as pictures (a confusion matrix in TensorBoard), and a saliency heatmap over its image."""

from __future__ import annotations

import numpy as np
import torch

# Dark blue -> teal -> yellow, a perceptually ordered ramp in the spirit of viridis.
_RAMP = torch.tensor([[0.27, 0.00, 0.33], [0.13, 0.57, 0.55], [0.99, 0.91, 0.14]])


def heatmap(values: torch.Tensor, cell: int | None = None, max_side: int = 512) -> torch.Tensor:
    """R x C values in [0, 1] -> 3 x (R cell) x (C cell) float image, each value a square cell."""
    values = values.detach().float().cpu().clamp(0, 1)
    rows, cols = values.shape
    cell = cell or max(1, min(32, max_side // max(rows, cols)))
    position = values * (len(_RAMP) - 1)
    low = position.floor().long().clamp(max=len(_RAMP) - 2)
    weight = (position - low).unsqueeze(-1)
    colours = _RAMP[low] * (1 - weight) + _RAMP[low + 1] * weight  # R x C x 3
    image = colours.permute(2, 0, 1)
    return image.repeat_interleave(cell, dim=1).repeat_interleave(cell, dim=2)


def heat_overlay(image: np.ndarray, values: np.ndarray, alpha: float = 0.6) -> np.ndarray:
    """H x W x 3 uint8 RGB with H x W values in [0, 1] laid over it in the ramp's colours, each
    pixel's colour weighted by its value: where the value is 0 the image shows as it is."""
    colours = heatmap(torch.from_numpy(np.ascontiguousarray(values)), cell=1).permute(1, 2, 0).numpy() * 255
    weight = alpha * np.clip(values, 0, 1)[..., None]
    return (image.astype(np.float32) * (1 - weight) + colours * weight).round().astype(np.uint8)

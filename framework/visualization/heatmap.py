"""Matrices as pictures (a confusion matrix in TensorBoard)."""

from __future__ import annotations

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

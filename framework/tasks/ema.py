"""Exponential moving average of a generator's weights (GANTask, CycleGANTask)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def update_ema(ema: nn.Module, source: nn.Module, decay: float, copy_only: bool) -> None:
    """EMA <- decay * EMA + (1 - decay) * source (a plain copy when `copy_only`, e.g. for the
    first `ema_start` generator updates). Buffers (normalisation statistics) are copied as they are."""
    for average, param in zip(ema.parameters(), source.parameters()):
        if copy_only:
            average.copy_(param)
        else:
            average.lerp_(param, 1 - decay)
    for average, buffer in zip(ema.buffers(), source.buffers()):
        average.copy_(buffer)

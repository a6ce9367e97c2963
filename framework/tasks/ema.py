"""Exponential moving averages of a task's generators, one mechanism for every GAN task.

    self.ema = EMA({"generator": generator}, decay=0.999, start=0)   # at build time
    self.ema.update({"generator": self.generator})                  # after each generator update
    self.ema["generator"]                                           # the average, for evaluation

Each average is a copy of its network without trainable parameters (a submodule of the EMA,
so checkpointed, in no optimizer and no DDP wrapper). The EMA counts the generator updates it
followed (a `Counter`, checkpointed): for the first `start` of them it copies the generators
(StyleGAN's ramp-free start), afterwards average <- decay x average + (1 - decay) x network.
Buffers (normalisation statistics) are copied as they are.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from framework.dist import unwrap
from framework.tasks.parts import Counter


@torch.no_grad()
def update_ema(ema: nn.Module, source: nn.Module, decay: float, copy_only: bool) -> None:
    """EMA <- decay * EMA + (1 - decay) * source (a plain copy when `copy_only`)."""
    for average, param in zip(ema.parameters(), source.parameters()):
        if copy_only:
            average.copy_(param)
        else:
            average.lerp_(param, 1 - decay)
    for average, buffer in zip(ema.buffers(), source.buffers()):
        average.copy_(buffer)


class EMA(nn.Module):
    def __init__(self, networks: dict[str, nn.Module], decay: float, start: int = 0):
        super().__init__()
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) or null, got {decay!r}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"ema_start must be an integer >= 0, got {start!r}")
        for name, network in networks.items():
            self.add_module(name, copy.deepcopy(network).requires_grad_(False))
        self.decay, self.start = float(decay), start
        self.updates = Counter()  # generator updates followed

    def __getitem__(self, name: str) -> nn.Module:
        return self._modules[name]

    @torch.no_grad()
    def update(self, sources: dict[str, nn.Module]) -> None:
        """Follow one generator update of each (possibly DDP-wrapped) network in `sources`."""
        copy_only = self.updates.increment() <= self.start
        for name, source in sources.items():
            update_ema(self[name], unwrap(source), self.decay, copy_only)

"""Diversity of a conditional generator: how much two draws for the same condition differ.

`Diversity` reads `outputs["fake"]` and `outputs["fake_alt"]`: two images generated from the
same label map with different noise (N x C x H x W floats in [0, 1]). It reports the mean
absolute difference over every pixel and channel, on the 0..1 scale (the 8-bit difference / 255):
0 means the noise is ignored (a deterministic generator, or mode collapse), larger is more varied.
A sum and a count: exact under DDP.
"""

from __future__ import annotations

from typing import Any

import torch

from framework.metrics.base import Metric
from framework.registry import METRICS


@METRICS.register()
class Diversity(Metric):
    """Mean |fake - fake_alt| over pixels and channels, in [0, 1]; key `Diversity`."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.zeros((), dtype=torch.float64))
        self.add_state("count", torch.zeros((), dtype=torch.int64))

    def update(self, outputs: dict[str, Any]) -> None:
        if "fake" not in outputs or "fake_alt" not in outputs:
            raise ValueError("Diversity needs two draws for the same labels, 'fake' and 'fake_alt', in the task's "
                             f"evaluation outputs (they have: {', '.join(sorted(outputs))})")
        fake, alternative = outputs["fake"], outputs["fake_alt"]
        if fake.shape != alternative.shape:
            raise ValueError(f"fake {tuple(fake.shape)} and fake_alt {tuple(alternative.shape)} differ in shape")
        self.to(fake.device)
        self.total += (fake.float() - alternative.float()).abs().sum(dtype=torch.float64)
        self.count += fake.numel()

    def result_names(self) -> list[str]:
        return ["Diversity"]

    def compute(self) -> dict[str, float]:
        return {"Diversity": (self.total / self.count.clamp_min(1)).item()}

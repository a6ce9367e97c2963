"""Batching samples, with the one mistake torch's collate cannot name: samples of different sizes.

The start-up check (engine/startup_check.py) compares two training samples; a split whose fifth
image is larger (a CycleGAN trainA, a synthesis val split of mixed sizes) got past it and ended in
torch's "stack expects each tensor to be equal size" traceback, at the first iteration that drew
it or at the first evaluation. `SizeCheckedCollate` batches as `default_collate` does and, when
that fails on tensors of different shapes, raises one DataError naming two of the samples (their
names) and their sizes. It costs nothing while the batch is well formed: the shapes are compared
only after torch has refused.
"""

from __future__ import annotations

import torch
from torch.utils.data import default_collate

from framework.errors import DataError


class SizeCheckedCollate:
    """default_collate, naming the samples of a batch whose `path` (e.g. "data.train") sizes differ."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, samples: list):
        try:
            return default_collate(samples)
        except RuntimeError as err:
            mismatch = size_mismatch(samples, self.path)
            if mismatch is None:
                raise
            raise DataError(mismatch) from err


def size_mismatch(samples: list, path: str) -> str | None:
    """The line naming the first key whose tensors differ in shape between two samples, or None."""
    if not samples or not all(isinstance(sample, dict) for sample in samples):
        return None
    for key, first in samples[0].items():
        if not isinstance(first, torch.Tensor):
            continue
        for index, sample in enumerate(samples[1:], 1):
            other = sample.get(key)
            if isinstance(other, torch.Tensor) and other.shape != first.shape:
                shown = [f"{sample_name(samples[i], key, i)} is {size(samples[i][key])}" for i in (0, index)]
                return (f"{path}: samples of different sizes in one batch ({key}: {', '.join(shown)}), which no batch "
                        f"can hold: images of mixed sizes; add a Resize (or a crop) to {path}.dataset.pipeline, or "
                        f"give the files one size")
    return None


def sample_name(sample: dict, key: str, position: int) -> str:
    """The sample's name for `key` (an unpaired sample names each side: name_a for "a")."""
    name = sample.get(f"name_{key}", sample.get("name"))
    return str(name) if name is not None else f"the batch's sample {position}"


def size(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape[-2:])) if tensor.ndim >= 2 else str(tuple(tensor.shape))

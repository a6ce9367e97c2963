"""Samplers that make data order and augmentation a pure function of (seed, epoch, index).

`EpochSampler` yields plain int indices, as any PyTorch sampler, to any dataset. A dataset that
sets the class attribute `takes_sample_seed = True` (the framework's `AugmentedDataset` does)
gets `(index, sample_seed)` pairs instead and reseeds its augmentation with `sample_seed`, so
what a sample looks like does not depend on which worker or which process loads it. That is
what makes a resumed run and a run on N processes see exactly the data an uninterrupted
single-process run sees.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Sampler


def epoch_sample_seeds(seed: int, epoch: int, size: int) -> np.ndarray:
    """The 32-bit augmentation seed of every sample of a dataset of `size` in one epoch:
    entry i is sample i's, a pure function of (seed, epoch, i). Drawn for the whole epoch
    at once (8 bytes a sample): a SeedSequence per sample cost ~6 us each in the loop."""
    generator = np.random.default_rng(np.random.SeedSequence([seed, epoch]))
    return generator.integers(0, 2**32, size=size, dtype=np.uint64)


class EpochSampler(Sampler):
    """Training order for one rank: a per-epoch permutation, ranks taking interleaved slices.

    Rank r of W takes positions r, r+W, r+2W... of the permutation, so the first k batches
    of b samples on each of W ranks hold the same samples as the first k batches of W*b on
    one process. With `drop_last` the permutation is cut to a multiple of W (no padding).
    `set_start(n)` skips the epoch's first n positions, the samples every rank together has
    consumed (mid-epoch resume), without loading them. The position counts samples, not a
    rank's batches, so a run resumed on another number of processes continues at the same
    sample: rank r then takes n+r, n+r+W... (the rest cut to a multiple of W, so that every
    rank has as many batches).
    """

    def __init__(self, size: int, shuffle: bool = True, seed: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool = True, with_seed: bool = False):
        if size < world_size:
            raise ValueError(f"dataset of {size} samples is smaller than the {world_size} processes")
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.with_seed = with_seed  # yield (index, sample_seed) for datasets that take it
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.start = 0

    def set_start(self, position: int) -> None:
        """Skip the epoch's first `position` samples (over all ranks together)."""
        self.start = position

    def _rank_indices(self) -> np.ndarray:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator).numpy()
        else:
            order = np.arange(self.size)
        rest = order[self.start :]
        uneven = len(rest) % self.world_size
        if uneven and self.drop_last:
            rest = rest[: len(rest) - uneven]
        elif uneven:  # padded from the epoch's beginning, as DistributedSampler pads
            rest = np.concatenate([rest, order[: self.world_size - uneven]])
        return rest[self.rank :: self.world_size]

    def __iter__(self):
        indices = self._rank_indices().tolist()
        if not self.with_seed:
            return iter(indices)
        seeds = epoch_sample_seeds(self.seed, self.epoch, self.size)
        return ((index, int(seeds[index])) for index in indices)

    def __len__(self) -> int:
        rest = max(self.size - self.start, 0)
        return rest // self.world_size if self.drop_last else -(-rest // self.world_size)


class ShardSampler(Sampler):
    """Evaluation order: rank r takes r, r+W, ... once each, no padding, so metric sums are exact."""

    def __init__(self, size: int, rank: int = 0, world_size: int = 1):
        self.indices = np.arange(rank, size, world_size)

    def __iter__(self):
        return (int(i) for i in self.indices)

    def __len__(self) -> int:
        return len(self.indices)

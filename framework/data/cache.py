"""`cache: memory`: decode every sample once, in the main process, and keep it in RAM.

    data:
      train: {dataset: {...}, cache: memory, cache_limit_mb: 2048, num_workers: auto}

A dataset's loader method (`load_sample`, `load_pair` or `load_image`: file reads, JPEG/PNG
decoding, rendering) runs once per sample when the loader is built; afterwards a sample costs
only its augmentation, which is seeded per sample as before, so a cached run sees exactly the
samples of an uncached one. The cache is filled before any worker starts, so forked workers
share its pages instead of holding copies. Arrays are stored read-only: a transform that
would modify a cached image in place fails loudly instead of corrupting later epochs.

`cache_limit_mb` caps the decoded bytes; past it the remaining samples are decoded per access
(and the log says how many were cached).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from framework.errors import ConfigError

logger = logging.getLogger("framework")

CACHE_MODES = (None, "memory")
LOADER_METHODS = ("load_sample", "load_pair", "load_image")  # the undecorated reads of our bases


def _loader_method(dataset) -> str:
    for name in LOADER_METHODS:
        if callable(getattr(dataset, name, None)):
            return name
    raise ConfigError(f"cache: memory needs a dataset with one of {', '.join(LOADER_METHODS)}(index) "
                      f"(the bases in framework/data); {type(dataset).__name__} has none")


def _freeze(value):
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    return value


def _nbytes(sample) -> int:
    return sum(v.nbytes for v in sample if isinstance(v, np.ndarray))


class DecodedCache:
    """The decoded samples of one dataset, filled once; a stand-in for its loader method."""

    def __init__(self, dataset, limit_mb: float):
        self.method = _loader_method(dataset)
        self.decode = getattr(dataset, self.method)
        self.samples: list[tuple] = []
        self.nbytes = 0
        limit = limit_mb * 2**20
        start = time.perf_counter()
        for index in range(len(dataset)):
            sample = tuple(_freeze(v) for v in self.decode(index))
            if self.nbytes + _nbytes(sample) > limit:
                break
            self.samples.append(sample)
            self.nbytes += _nbytes(sample)
        self.seconds = time.perf_counter() - start

    def __call__(self, index: int):
        if index < len(self.samples):
            return self.samples[index]
        return self.decode(index)


def cache_in_memory(dataset, mode, limit_mb, path: str):
    """Attach a DecodedCache to `dataset` when `mode` is "memory"; returns the dataset."""
    if mode not in CACHE_MODES:
        raise ConfigError(f"{path}.cache: must be null or memory, got {mode!r}")
    if mode is None:
        return dataset
    if not isinstance(limit_mb, (int, float)) or isinstance(limit_mb, bool) or limit_mb <= 0:
        raise ConfigError(f"{path}.cache_limit_mb: must be a positive number, got {limit_mb!r}")
    cache = DecodedCache(dataset, limit_mb)
    setattr(dataset, cache.method, cache)  # the instance attribute shadows the class's method
    dataset.decoded_cache = cache
    cached = len(cache.samples)
    note = "" if cached == len(dataset) else f" (cache_limit_mb {limit_mb} reached: the rest are decoded per step)"
    logger.info(f"{path}: cached {cached} of {len(dataset)} decoded samples, "
                f"{cache.nbytes / 2**20:.1f} MB in {cache.seconds:.1f}s{note}")
    return dataset

"""`cache: memory`: decode every sample once, in the main process, and keep it in RAM.

    data:
      train: {dataset: {...}, cache: memory, cache_limit_mb: 2048, num_workers: auto}

A dataset's loader method (`load_sample`, `load_pair`, `load_image` or `load_images`: file reads, JPEG/PNG
decoding, rendering) runs once per sample when the loader is built; afterwards a sample costs
only its augmentation, which is seeded per sample as before, so a cached run sees exactly the
samples of an uncached one. The cache is filled before any worker starts, so forked workers
share its pages instead of holding copies. Arrays are stored read-only: a transform that
would modify a cached image in place fails loudly instead of corrupting later epochs.

`cache_limit_mb` caps the decoded bytes; past it the remaining samples are decoded per access
(and the log says how many were cached).

`cache: auto` (the default) caches a dataset whose whole decoded size fits in a budget: a
quarter of the memory available when the loader is built (shared by the processes of this
machine), at most `cache_limit_mb`. The size is estimated from the first samples; the log says
what was decided and why. Where no worker process will read it, the auto cache is filled as the
first epoch reads the samples instead of before the first step (`fill_cache`). A dataset without one of the loader methods below (a custom dataset
that is not built on the framework's bases) is read as it is, as is one that sets
`cacheable = False` (its loader method is not a pure function of the index).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from framework.errors import ConfigError

logger = logging.getLogger("framework")

CACHE_MODES = (None, "memory", "auto")
ESTIMATE_SAMPLES = 8  # samples decoded to estimate the whole dataset's decoded size
# the undecorated reads of our bases (load_images: both domains of an unpaired dataset)
LOADER_METHODS = ("load_sample", "load_pair", "load_image", "load_images")


def _loader_method(dataset) -> str | None:
    for name in LOADER_METHODS:
        if callable(getattr(dataset, name, None)):
            return name
    return None


def _require_loader_method(dataset) -> str:
    name = _loader_method(dataset)
    if name is not None:
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
    """The decoded samples of one dataset; a stand-in for its loader method. Filled at once by
    `fill()` (in index order, up to the limit), or sample by sample as they are first read."""

    def __init__(self, dataset, limit_mb: float, path: str):
        self.method = _require_loader_method(dataset)
        self.decode = getattr(dataset, self.method)
        self.path, self.size, self.limit_mb = path, len(dataset), limit_mb
        self.samples: dict[int, tuple] = {}
        self.nbytes = 0
        self.seconds = 0.0
        self.filled_at_start = False

    def _decode(self, index: int) -> tuple[tuple, bool]:
        """The sample, read-only, and whether it was kept (within the limit)."""
        sample = tuple(_freeze(v) for v in self.decode(index))
        if self.nbytes + _nbytes(sample) > self.limit_mb * 2**20:
            return sample, False
        self.samples[index] = sample
        self.nbytes += _nbytes(sample)
        return sample, True

    def fill(self) -> None:
        """Decode every sample now, in index order until the limit (before workers fork: they share the pages)."""
        start = time.perf_counter()
        for index in range(self.size):
            if index not in self.samples and not self._decode(index)[1]:
                break
        self.seconds, self.filled_at_start = time.perf_counter() - start, True
        cached = len(self.samples)
        note = "" if cached == self.size else f" (cache_limit_mb {self.limit_mb} reached: the rest are decoded per step)"
        logger.info(f"{self.path}: cached {cached} of {self.size} decoded samples, "
                    f"{self.nbytes / 2**20:.1f} MB in {self.seconds:.1f}s{note}")

    def __call__(self, index: int):
        sample = self.samples.get(index)
        return sample if sample is not None else self._decode(index)[0]


def available_memory_mb() -> float:
    """Memory the system can give without swapping (MemAvailable), in MB; total memory where
    /proc/meminfo is absent."""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20


def auto_budget_mb(limit_mb: float, available_mb: float | None = None, processes: int | None = None) -> float:
    """What `cache: auto` may use: a quarter of the available memory, shared by this machine's
    processes (torchrun's LOCAL_WORLD_SIZE), at most `cache_limit_mb`."""
    available_mb = available_memory_mb() if available_mb is None else available_mb
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if processes is None else processes
    return min(limit_mb, available_mb / 4 / max(1, processes))


def estimated_size_mb(dataset) -> float:
    """The decoded size of the whole dataset, from its first few samples."""
    decode = getattr(dataset, _require_loader_method(dataset))
    count = min(len(dataset), ESTIMATE_SAMPLES)
    sampled = sum(_nbytes(decode(index)) for index in range(count))
    return sampled / max(count, 1) * len(dataset) / 2**20


def _check_limit(limit_mb, path: str) -> None:
    if not isinstance(limit_mb, (int, float)) or isinstance(limit_mb, bool) or limit_mb <= 0:
        raise ConfigError(f"{path}.cache_limit_mb: must be a positive number, got {limit_mb!r}")


def cache_in_memory(dataset, mode, limit_mb, path: str, available_mb: float | None = None, fill: bool = True):
    """Attach a DecodedCache to `dataset` when `mode` is "memory", or "auto" and the dataset fits
    the budget; returns the dataset. `fill`: decode every sample now; otherwise the cache keeps
    each sample as it is first read (the loader's choice: `fill_cache`)."""
    if mode not in CACHE_MODES:
        raise ConfigError(f"{path}.cache: must be null, memory or auto, got {mode!r}")
    if mode is None:
        return dataset
    _check_limit(limit_mb, path)
    if mode == "auto":
        if _loader_method(dataset) is None or not getattr(dataset, "cacheable", True) or len(dataset) == 0:
            logger.debug(f"{path}: cache: auto: {type(dataset).__name__} is read as it is (not cacheable)")
            return dataset
        budget, size = auto_budget_mb(limit_mb, available_mb), estimated_size_mb(dataset)
        if size > budget:
            logger.info(f"{path}: cache: auto: not cached: about {size:.0f} MB decoded, over the budget of "
                        f"{budget:.0f} MB (a quarter of the available memory, at most cache_limit_mb)")
            return dataset
        logger.info(f"{path}: cache: auto: about {size:.1f} MB decoded fits the budget of {budget:.0f} MB")
    cache = DecodedCache(dataset, limit_mb, path)
    setattr(dataset, cache.method, cache)  # the instance attribute shadows the class's method
    dataset.decoded_cache = cache
    if fill:
        cache.fill()
    return dataset


def fill_cache(dataset, mode, workers: int) -> None:
    """Where the loader's cache is filled. Before the first step when worker processes will read
    it (filled in the main process, their forks share its pages; filled in each worker, every
    worker would hold a copy) or `cache: memory` asked for it (decoded once, up front, as
    documented). Otherwise, `cache: auto` in the main process, during the first epoch: those
    samples are decoded then anyway, so the first step does not wait for all of them
    (the Quickstart's 2000 shapes: about 2-3 s) and the run as a whole decodes no more."""
    cache = getattr(dataset, "decoded_cache", None)
    if cache is None or cache.filled_at_start:
        return
    if workers > 0 or mode == "memory":
        cache.fill()
    else:
        logger.info(f"{cache.path}: cache: auto: decoded samples kept as the first epoch reads them "
                    "(no worker processes)")

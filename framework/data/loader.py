"""DataLoaders from a config section:

    data:
      train: {dataset: {type: SyntheticShapes, ...}, batch_size: 8, num_workers: 2}
      val:   {dataset: {...}, batch_size: 8}

`batch_size` is per process: under torchrun with W processes the global batch is W x batch_size.

`num_workers: auto` sizes the worker processes with the compute in mind: on a CPU device the
training threads already use every core, so a worker process only pays when there are cores
to spare (none on up to 4 cores, or when the cache leaves only augmentation to do);
on CUDA the cores are free for data, up to 8 workers. `cache: memory` (framework/data/cache.py)
decodes every sample once when the loader is built; `cache: auto`, the default, keeps the decoded
samples when the dataset fits a quarter of the available memory (at most `cache_limit_mb`):
decoded when the loader is built where worker processes will share them, else as the first
epoch reads them (`fill_cache`).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping

import numpy as np
import torch
from torch.utils.data import DataLoader

from framework.data.cache import cache_in_memory, fill_cache
from framework.data.collate import SizeCheckedCollate
from framework.data.sampler import EpochSampler, ShardSampler
from framework.errors import ConfigError
from framework.registry import DATASETS, reject_unknown_keys

LOADER_KEYS = {
    "dataset": None,
    "batch_size": 8,
    "num_workers": "auto",  # auto: see auto_workers
    "shuffle": True,  # training only; evaluation is always in order
    "pin_memory": "auto",  # auto: when training on CUDA
    "persistent_workers": True,
    "cache": "auto",  # memory: decode every sample once and keep it in RAM; auto: when it fits (framework/data/cache.py)
    "cache_limit_mb": 4096,  # decoded bytes cached at most; the rest is decoded per access
}


def auto_workers(device: torch.device | None, cached: bool, cores: int | None = None) -> int:
    """Worker processes for `num_workers: auto` (see the module docstring for the reasoning)."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if device is not None and device.type == "cuda":
        return max(1, min(8, cores - 1))
    if cached or cores <= 4:
        return 0
    return min(8, cores // 4)


def resolve_workers(setting, path: str, device: torch.device | None, cached: bool, cores: int | None = None) -> int:
    if setting == "auto":
        return auto_workers(device, cached, cores)
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise ConfigError(f"{path}.num_workers: must be auto or an integer >= 0, got {setting!r}")
    return setting


def loader_settings(section: Mapping, path: str) -> dict:
    """The section's settings with defaults filled in; unknown keys are errors."""
    if not isinstance(section, Mapping):
        raise ConfigError(f"{path}: expected a mapping with a 'dataset' node, got {section!r}")
    reject_unknown_keys(section, LOADER_KEYS, path)
    settings = {**LOADER_KEYS, **section}
    if settings["dataset"] is None:
        raise ConfigError(f"{path}.dataset: missing (e.g. dataset: {{type: SyntheticShapes}})")
    if not isinstance(settings["batch_size"], int) or settings["batch_size"] < 1:
        raise ConfigError(f"{path}.batch_size: must be a positive integer, got {settings['batch_size']!r}")
    return settings


def describe_loader(loader: DataLoader, section: Mapping, path: str) -> str:
    """One log line: what the loader settings came to, naming those an `auto` decided."""
    settings = {**LOADER_KEYS, **section}
    chosen = [f"{loader.num_workers} worker process{'es' if loader.num_workers != 1 else ''}"
              + (" (num_workers: auto)" if settings["num_workers"] == "auto" else ""),
              ("pinned memory" if loader.pin_memory else "memory not pinned")
              + (" (pin_memory: auto)" if settings["pin_memory"] == "auto" else ""),
              "persistent workers" if loader.persistent_workers else "workers not persistent"]
    if loader.num_workers == 0:
        chosen.pop()  # no workers to keep
    cache = getattr(loader.dataset, "decoded_cache", None)
    if cache is None:
        chosen.append("samples read per access")
    else:
        chosen.append("decoded samples cached" + ("" if cache.filled_at_start else " as the first epoch reads them"))
    return f"{path}: " + ", ".join(chosen)


def _seed_worker(worker_id: int) -> None:
    # torch seeds each worker differently; python and numpy would otherwise repeat the
    # parent's state in every forked worker.
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


def build_dataloader(section: Mapping, path: str, *, train: bool, seed: int = 0, rank: int = 0,
                     world_size: int = 1, device: torch.device | None = None, cores: int | None = None,
                     browsing: bool = False) -> DataLoader:
    """`cores`: what `num_workers: auto` counts (the run's usable cores, runtime/threads.py; None:
    the affinity mask). `browsing` (tools/browse_dataset.py): training's order and augmentation
    without its batch rule, so a split smaller than a batch is shown and a last incomplete batch kept."""
    settings = loader_settings(section, path)
    dataset = DATASETS.build(settings["dataset"], path=f"{path}.dataset")
    dataset = cache_in_memory(dataset, settings["cache"], settings["cache_limit_mb"], path, fill=False)
    if train:
        per_process = len(dataset) // world_size
        if per_process < settings["batch_size"] and not browsing:
            processes = f" of {len(dataset)} on {world_size} processes" if world_size > 1 else ""
            raise ConfigError(
                f"{path}: {per_process} samples per process{processes} is fewer than batch_size "
                f"{settings['batch_size']} (training drops incomplete batches)"
            )
        sampler = EpochSampler(len(dataset), shuffle=settings["shuffle"], seed=seed, rank=rank,
                               world_size=world_size, drop_last=True,
                               with_seed=getattr(dataset, "takes_sample_seed", False))
    else:
        sampler = ShardSampler(len(dataset), rank=rank, world_size=world_size)
    workers = resolve_workers(settings["num_workers"], path, device, hasattr(dataset, "decoded_cache"), cores)
    fill_cache(dataset, settings["cache"], workers)
    pin = settings["pin_memory"]
    if pin == "auto":
        pin = device is not None and device.type == "cuda"
    return DataLoader(
        dataset,
        batch_size=settings["batch_size"],
        sampler=sampler,
        num_workers=workers,
        pin_memory=bool(pin),
        drop_last=train and not browsing,
        persistent_workers=bool(settings["persistent_workers"]) and workers > 0,
        worker_init_fn=_seed_worker,
        collate_fn=SizeCheckedCollate(path),  # names two samples of different sizes
        # Its own generator, so creating an iterator never consumes the global torch RNG
        # (which would make a resumed run diverge from an uninterrupted one).
        generator=torch.Generator().manual_seed(seed),
    )

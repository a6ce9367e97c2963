"""DataLoaders from a config section:

    data:
      train: {dataset: {type: SyntheticShapes, ...}, batch_size: 8, num_workers: 2}
      val:   {dataset: {...}, batch_size: 8}

`batch_size` is per process: under torchrun with W processes the global batch is W x batch_size.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import numpy as np
import torch
from torch.utils.data import DataLoader

from framework.data.sampler import EpochSampler, ShardSampler
from framework.errors import ConfigError
from framework.registry import DATASETS, did_you_mean

LOADER_KEYS = {
    "dataset": None,
    "batch_size": 8,
    "num_workers": 2,
    "shuffle": True,  # training only; evaluation is always in order
    "pin_memory": "auto",  # auto: when training on CUDA
    "persistent_workers": True,
}


def loader_settings(section: Mapping, path: str) -> dict:
    """The section's settings with defaults filled in; unknown keys are errors."""
    if not isinstance(section, Mapping):
        raise ConfigError(f"{path}: expected a mapping with a 'dataset' node, got {section!r}")
    for key in section:
        if key not in LOADER_KEYS:
            raise ConfigError(f"{path}.{key}: unknown key{did_you_mean(key, LOADER_KEYS)}")
    settings = {**LOADER_KEYS, **section}
    if settings["dataset"] is None:
        raise ConfigError(f"{path}.dataset: missing (e.g. dataset: {{type: SyntheticShapes}})")
    if not isinstance(settings["batch_size"], int) or settings["batch_size"] < 1:
        raise ConfigError(f"{path}.batch_size: must be a positive integer, got {settings['batch_size']!r}")
    return settings


def _seed_worker(worker_id: int) -> None:
    # torch seeds each worker differently; python and numpy would otherwise repeat the
    # parent's state in every forked worker.
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


def build_dataloader(section: Mapping, path: str, *, train: bool, seed: int = 0, rank: int = 0,
                     world_size: int = 1, device: torch.device | None = None) -> DataLoader:
    settings = loader_settings(section, path)
    dataset = DATASETS.build(settings["dataset"], path=f"{path}.dataset")
    if train:
        per_process = len(dataset) // world_size
        if per_process < settings["batch_size"]:
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
    workers = int(settings["num_workers"])
    pin = settings["pin_memory"]
    if pin == "auto":
        pin = device is not None and device.type == "cuda"
    return DataLoader(
        dataset,
        batch_size=settings["batch_size"],
        sampler=sampler,
        num_workers=workers,
        pin_memory=bool(pin),
        drop_last=train,
        persistent_workers=bool(settings["persistent_workers"]) and workers > 0,
        worker_init_fn=_seed_worker,
        # Its own generator, so creating an iterator never consumes the global torch RNG
        # (which would make a resumed run diverge from an uninterrupted one).
        generator=torch.Generator().manual_seed(seed),
    )

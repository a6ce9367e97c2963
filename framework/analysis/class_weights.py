"""Class weights from the training masks, for losses configured with `weight: auto`.

    loss: {type: CrossEntropyLoss, weight: auto, weight_method: median_frequency}

Methods (class c, over the training set's un-augmented masks, ignored pixels left out):
- median_frequency (Eigen & Fergus, 2015): f_c = pixels of c / pixels of the images containing
  c; w_c = median(f) / f_c. A class as frequent as the median class weighs 1.
- inverse_log (ENet, Paszke et al., 2016): p_c = pixels of c / all pixels; w_c = 1 / ln(1.02 + p_c),
  between 1 (a class covering everything) and ~50 (a vanishing one).
A class with no pixels at all gets weight 0 (nothing to weigh) and a warning.

The counts are computed once, on rank 0, cached in <work_dir>/class_weights.json (reused while
the dataset's config and length are unchanged), logged, and broadcast, so every rank trains
with the same weights.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
from torch import nn

from framework.analysis.dataset_scan import class_totals, scan
from framework.dist import broadcast_from_main_, is_main
from framework.errors import ConfigError
from framework.losses.pixel_base import AUTO_WEIGHT_METHODS as METHODS

CACHE_NAME = "class_weights.json"
logger = logging.getLogger("framework")


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"weight_method: one of {METHODS}, got {method!r}")
    return method


def compute_weights(pixels: np.ndarray, image_pixels: np.ndarray, method: str) -> np.ndarray:
    """Per-class weights (float64) from pixel counts; absent classes weigh 0."""
    check_method(method)
    present = pixels > 0
    weights = np.zeros(len(pixels), dtype=np.float64)
    if not present.any():
        return weights
    if method == "median_frequency":
        frequency = pixels[present] / image_pixels[present]
        weights[present] = np.median(frequency) / frequency
    else:
        weights[present] = 1.0 / np.log(1.02 + pixels[present] / pixels.sum())
    return weights


def auto_weighted_losses(task: nn.Module) -> list[nn.Module]:
    """Losses in `task` waiting for class weights from the data (`weight: auto`)."""
    return [m for m in task.modules() if getattr(m, "auto_weight_method", None) and hasattr(m, "set_class_weights")]


def _dataset_key(dataset, dataset_config) -> dict:
    return {"dataset": dataset_config, "samples": len(dataset), "num_classes": dataset.num_classes,
            "ignore_index": dataset.ignore_index}


def class_pixel_counts(dataset, work_dir: str | None, dataset_config=None, workers: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(pixels per class, pixels of the images containing each class), from the cache when it
    was made for this dataset, else by scanning the dataset (and caching the result)."""
    key = _dataset_key(dataset, dataset_config)
    cache = Path(work_dir) / CACHE_NAME if work_dir else None
    if cache is not None and cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            logger.info(f"class pixel counts read from {cache}")
            return np.array(saved["pixels"], dtype=np.int64), np.array(saved["image_pixels"], dtype=np.int64)
    logger.info(f"counting class pixels over {len(dataset)} training masks (once; cached in the work dir)")
    pixels, image_pixels, _ = class_totals(scan(dataset, workers), dataset.num_classes)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "pixels": pixels.tolist(), "image_pixels": image_pixels.tolist(),
                  "weights": {m: compute_weights(pixels, image_pixels, m).tolist() for m in METHODS}}
        tmp = cache.with_name(cache.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(cache)
    return pixels, image_pixels


def resolve_auto_class_weights(task: nn.Module, dataset, work_dir: str | None, dataset_config=None,
                               device: torch.device | None = None, workers: int = 0) -> None:
    """Give every `weight: auto` loss of `task` its weights, identical on every rank; the masks
    are read in `workers` processes."""
    losses = auto_weighted_losses(task)
    if not losses:
        return
    if not hasattr(dataset, "num_classes"):
        raise ConfigError("weight: auto needs a segmentation training dataset (with masks and num_classes)")
    counts = torch.zeros(2, dataset.num_classes, dtype=torch.float64)
    if is_main():
        pixels, image_pixels = class_pixel_counts(dataset, work_dir, dataset_config, workers)
        counts = torch.from_numpy(np.stack([pixels, image_pixels]).astype(np.float64))
    broadcast_from_main_(counts)  # every rank calls it: rank 0's counts everywhere
    pixels, image_pixels = counts.numpy().astype(np.int64)
    for loss in losses:
        weights = compute_weights(pixels, image_pixels, loss.auto_weight_method)
        names = getattr(dataset, "class_names", range(len(weights)))
        shown = ", ".join(f"{n} {w:.3f}" for n, w in zip(names, weights))
        logger.info(f"{type(loss).__name__} class weights ({loss.auto_weight_method}): {shown}")
        absent = [str(n) for n, p in zip(names, pixels) if p == 0]
        if absent:
            logger.warning(f"warning: classes with no training pixels get weight 0: {', '.join(absent)}")
        loss.set_class_weights(torch.tensor(weights, dtype=torch.float32, device=device))

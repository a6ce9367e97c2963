"""What the inference tools share: a trained task from a config and a checkpoint, the list of
input images, and writing masks, overlays and images."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image

from framework.config import import_custom_modules, load_config, to_plain
from framework.data.folder import IMAGE_SUFFIXES
from framework.engine import checkpoint as ckpt
from framework.errors import DataError
from framework.registry import TASKS


def load_trained_task(config: str, checkpoint: str | None, overrides=(), device: torch.device | None = None):
    """(task in eval mode on `device`, resolved plain config). Without a checkpoint the task keeps
    its initial weights (useful to analyse or export an untrained network)."""
    cfg = load_config(config, list(overrides))
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    torch.manual_seed(plain["seed"])  # without a checkpoint: the same initial weights every time
    task = TASKS.build(plain["task"], path="task")
    if checkpoint is not None:
        state = ckpt.load_checkpoint(checkpoint)  # a training checkpoint, read with weights_only
        ckpt.load_task_weights(task, state, checkpoint)
    return task.to(device or torch.device("cpu")).eval(), plain


def list_inputs(specs: list[str]) -> list[Path]:
    """Image files named by each spec: a file, a folder (its images, sorted) or a glob pattern."""
    found: list[Path] = []
    for spec in specs:
        if os.path.isdir(spec):
            found += sorted(p for p in Path(spec).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        elif os.path.isfile(spec):
            found.append(Path(spec))
        else:
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True))
            if not matches:
                raise DataError(f"--input {spec}: no such file or folder, and no file matches it")
            found += [p for p in matches if p.suffix.lower() in IMAGE_SUFFIXES]
    if not found:
        raise DataError(f"--input {' '.join(specs)}: no images ({', '.join(IMAGE_SUFFIXES)})")
    return found


def write_index_mask(path: Path, labels: np.ndarray, palette: np.ndarray) -> None:
    """H x W class ids as a palette PNG: the pixel values are the classes, the colours the palette."""
    mask = Image.fromarray(labels.astype(np.uint8), mode="P")
    flat = np.zeros((256, 3), dtype=np.uint8)
    flat[: len(palette)] = palette[:256]
    mask.putpalette(flat.ravel().tolist())
    mask.save(path)


def overlay(image: np.ndarray, labels: np.ndarray, palette: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """H x W x 3 uint8 RGB: the image blended with the class colours."""
    colours = palette[np.clip(labels, 0, len(palette) - 1)].astype(np.float32)
    return (image.astype(np.float32) * (1 - alpha) + colours * alpha).round().astype(np.uint8)


def write_rgb(path: Path, image: np.ndarray) -> None:
    """H x W x 3 uint8 RGB -> PNG (or any format OpenCV writes)."""
    if not cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
        raise DataError(f"cannot write {path}")

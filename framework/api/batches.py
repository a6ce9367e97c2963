"""Images in, batches out: how `Model` and tools/infer.py read what they are given and group it into
forward passes of same-size images."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from framework.errors import ConfigError

DEFAULT_BATCH = 4


def autocast(device: torch.device, enabled: bool):
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype, enabled=enabled)


def same_size_batches(items: Iterable, batch_size: int, read) -> Iterator[list[tuple[object, np.ndarray]]]:
    """Consecutive items whose `read(item)` arrays share a shape, `batch_size` at most, as
    [(item, array)]: one forward pass each, and the results stay in the items' order."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
    batch: list[tuple[object, np.ndarray]] = []
    for item in items:
        array = read(item)
        if batch and (len(batch) == batch_size or batch[0][1].shape != array.shape):
            yield batch
            batch = []
        batch.append((item, array))
    if batch:
        yield batch


def as_image(image, channels: int = 3) -> np.ndarray:
    """A path, a PIL image or an H x W x C uint8 array -> H x W x C array, read as tools/infer.py reads files."""
    from framework.data.channels import read_channels_image
    from framework.data.folder import read_rgb_image

    if isinstance(image, (str, Path)):
        return read_rgb_image(str(image)) if channels == 3 else read_channels_image(str(image), channels)
    array = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
    if array.ndim != 3 or array.shape[2] != channels:
        raise ConfigError(f"images: expected H x W x {channels} arrays, got shape {tuple(array.shape)}")
    return array


def listed(inputs, item_dims: int = 3) -> tuple[list, bool]:
    """(the inputs as a list, whether one input was given rather than a list of them). An array
    of `item_dims` + 1 dimensions is a stack of inputs (N x H x W x C images; N x H x W label maps
    with item_dims 2), any other one input (whose shape is then checked)."""
    single = isinstance(inputs, (str, Path)) or hasattr(inputs, "convert") or (
        isinstance(inputs, np.ndarray) and inputs.ndim != item_dims + 1)
    return ([inputs] if single else list(inputs)), single

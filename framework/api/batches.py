"""Images in, batches out: how `Model` and tools/infer.py read what they are given and group it into
forward passes of same-size images."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from framework.api.arguments import checked, refuse_tensor, type_name
from framework.errors import ConfigError

DEFAULT_BATCH = 4


def autocast(device: torch.device, enabled: bool):
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype, enabled=enabled)


def same_size_batches(items: Iterable, batch_size: int, read) -> Iterator[list[tuple[object, np.ndarray]]]:
    """Consecutive items whose `read(item)` arrays share a shape, `batch_size` at most, as
    [(item, array)]: one forward pass each, and the results stay in the items' order."""
    batch_size = checked({"batch_size": batch_size})["batch_size"]
    batch: list[tuple[object, np.ndarray]] = []
    for item in items:
        array = read(item)
        if batch and (len(batch) == batch_size or batch[0][1].shape != array.shape):
            yield batch
            batch = []
        batch.append((item, array))
    if batch:
        yield batch


def as_image(image, channels: int = 3, what: str = "images") -> np.ndarray:
    """A path, a PIL image or an array -> H x W x C pixels on the 0..255 scale, read as
    tools/infer.py reads files; `what` names the input in a refusal (images[2])."""
    from framework.data.channels import read_channels_image
    from framework.data.folder import read_rgb_image

    if isinstance(image, (str, Path)):
        input_file(image, what)
        return read_rgb_image(str(image)) if channels == 3 else read_channels_image(str(image), channels)
    if hasattr(image, "convert"):  # PIL
        return pixels(np.asarray(image.convert("RGB") if channels == 3 else image), channels, what)
    refuse_tensor(image, what)
    if not isinstance(image, np.ndarray):
        raise ConfigError(f"{what}: expected a path, a PIL image or an H x W x {channels} array, got {type_name(image)}")
    return pixels(image, channels, what)


def input_file(path, what: str) -> None:
    """A path given as an input names an existing file (not a folder)."""
    if not Path(path).is_file():
        raise ConfigError(f"{what}: {path}: " + ("a folder, not a file" if Path(path).is_dir() else "no such file"))


def as_label_map(item, what: str = "conditions") -> np.ndarray:
    """An index PNG's path, a PIL image or an array -> its array of class ids (checked by
    `Model.check_labels`: H x W integers, classes or the ignore index)."""
    from framework.data.folder import read_index_mask

    if isinstance(item, (str, Path)):
        input_file(item, what)
        return read_index_mask(str(item))
    if hasattr(item, "convert"):  # PIL: an index ("P") or grey ("L") image's pixel values are the ids
        return np.asarray(item)
    refuse_tensor(item, what)
    if not isinstance(item, np.ndarray):
        raise ConfigError(f"{what}: expected an index PNG's path, a PIL image or an H x W array of class ids, "
                          f"got {type_name(item)}")
    return item


def pixels(array: np.ndarray, channels: int, what: str) -> np.ndarray:
    """The rule for an image array: H x W x C (H x W for one channel); uint8 as is, uint16 (0..65535)
    and floats on the 0..255 scale as N-channel image files are read (data/channels.py); other
    integers when within 0..255. Floats all within 0..1 (but for black) are refused: on the 0..255
    scale they would be a near-black image, and the model would say so without a word."""
    from framework.data.channels import on_pixel_scale

    if array.ndim == 2 and channels == 1:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] != channels:
        raise ConfigError(f"{what}: expected H x W x {channels} arrays, got shape {tuple(array.shape)}")
    if array.dtype.kind in "iu" and array.dtype not in (np.uint8, np.uint16):
        if array.size and (array.min() < 0 or array.max() > 255):
            raise ConfigError(f"{what}: {array.dtype} values {array.min()}..{array.max()}, outside 0..255 "
                              "(uint16 images are read as 0..65535)")
        return array.astype(np.uint8)
    scaled = on_pixel_scale(array)
    if scaled is None:
        raise ConfigError(f"{what}: pixels of type {array.dtype}; expected uint8 (0..255), uint16 (0..65535) "
                          "or floats on the 0..255 scale")
    if array.dtype.kind == "f" and scaled.size:
        if not np.isfinite(scaled).all():
            raise ConfigError(f"{what}: float values include NaN or infinity")
        low, high = float(scaled.min()), float(scaled.max())
        if low < 0 or high > 255:
            raise ConfigError(f"{what}: float values {low:g}..{high:g}; floats are read on the 0..255 scale")
        if 0 < high <= 1:
            raise ConfigError(f"{what}: float values within 0..1; images are read on the 0..255 scale (as uint8): "
                              "give (image * 255).round().astype(np.uint8)")
    return scaled


def listed(inputs, what: str = "images", item_dims: int = 3) -> tuple[list, bool]:
    """(the inputs as a list, whether one input was given rather than a list of them): one path, PIL
    image or array, or a list or tuple of them. An N x H x W x C array (item_dims 3) is a stack of
    images; label maps (item_dims 2) come one array each, since an H x W x 3 array would be
    ambiguous (a colour rendering, or three maps)."""
    refuse_tensor(inputs, what)
    if isinstance(inputs, np.ndarray):
        return (list(inputs), False) if item_dims == 3 and inputs.ndim == 4 else ([inputs], True)
    if isinstance(inputs, (str, Path)) or hasattr(inputs, "convert"):
        return [inputs], True
    if isinstance(inputs, (list, tuple)):
        return list(inputs), False
    raise ConfigError(f"{what}: expected a path, a PIL image, an array or a list of them, got {type_name(inputs)}")


def item_name(what: str, index: int, single: bool) -> str:
    """How a refusal names one input: images, or images[2] of a list."""
    return what if single else f"{what}[{index}]"

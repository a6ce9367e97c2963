"""Files holding an input and its target side by side (pix2pix's layout: A | B, each half W wide),
read the same way by training and by tools/infer.py.

A dataset class whose files are such pairs declares `side_by_side_layout(node)`: from its config
node, the folder whose split folders hold the pairs (root/<split>/<name>.jpg) and the half training
gives the generator ("left" for A, "right" for B with `direction: BtoA`). tools/infer.py given a
file of such a folder (the published test split too, which no data section reads) translates that
half, as training and tools/test.py do, not the whole 2W-wide file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from framework.errors import DataError
from framework.registry import DATASETS, is_node

HALVES = ("left", "right")


def split_side_by_side(image: np.ndarray, path: str) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) halves of an image 2W wide; a DataError naming `path` when its width is odd."""
    if image.shape[1] % 2:
        raise DataError(f"{path}: width {image.shape[1]} is odd; expected A and B side by side, equally wide")
    half = image.shape[1] // 2
    return image[:, :half], image[:, half:]


def side_by_side_layouts(config: dict) -> dict[Path, str]:
    """{resolved root: input half} of the data sections of a (plain) config whose dataset reads
    side-by-side pairs; a relative root is read from the current folder, as training reads it."""
    layouts = {}
    for section in (config.get("data") or {}).values():
        node = section.get("dataset") if isinstance(section, dict) else None
        if not (is_node(node) and node["type"] in DATASETS):
            continue
        describe = getattr(DATASETS.get(node["type"]), "side_by_side_layout", None)
        if describe is not None:
            root, half = describe(node)
            layouts[Path(os.path.expanduser(str(root))).resolve()] = half
    return layouts


def input_half(path: Path, image: np.ndarray, layouts: dict[Path, str]) -> np.ndarray:
    """The half of `image` (read from `path`) training gives the generator when `path` lies in a split
    folder of a side-by-side root (root/<split>/<file>); else the image as it is."""
    half = layouts.get(Path(path).resolve().parent.parent)
    if half is None:
        return image
    left, right = split_side_by_side(image, str(path))
    return np.ascontiguousarray(left if half == "left" else right)

"""Folder datasets written to disk for the benchmarks (and the cache test): the built-in
synthetic shapes (or texture scenes) saved as a Pascal VOC layout, and synthetic pix2pix pairs
saved as A|B JPEGs.

    make_voc(root, count=300, size=64)        root/JPEGImages/*.jpg, root/SegmentationClass/*.png
                                              (palette PNGs), root/ImageSets/Segmentation/train.txt;
                                              size: one side, or (height, width)
    make_voc(root, scenes="textures")         the same layout of SyntheticTextures' scenes (7 classes:
                                              the semantic-synthesis benchmarks' data)
    make_aligned_pairs(root, count=300, size=64)   root/train/*.jpg, each 2*size wide: A | B

Both are pure functions of (count, size, seed), so every benchmark run reads the same files.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from framework.data.shapes import SyntheticShapes
from framework.data.textures import SyntheticTextures
from framework.visualization.palette import default_palette

JPEG_QUALITY = 90
SCENES = {"shapes": SyntheticShapes, "textures": SyntheticTextures}


def _write_jpeg(path: Path, rgb: np.ndarray) -> None:
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]):
        raise OSError(f"cannot write {path}")


def make_voc(root, count: int = 300, size: int | tuple[int, int] = 64, seed: int = 0, scenes: str = "shapes") -> Path:
    if scenes not in SCENES:
        raise ValueError(f"scenes: unknown {scenes!r}; choose one of {', '.join(SCENES)}")
    root = Path(root)
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    dataset = SCENES[scenes](num_samples=count, size=size, seed=seed)
    palette = [int(v) for color in default_palette(256).tolist() for v in color]
    names = []
    for index in range(count):
        image, mask, _ = dataset.load_sample(index)
        name = f"{index:06d}"
        _write_jpeg(root / "JPEGImages" / f"{name}.jpg", image)
        png = Image.fromarray(mask.astype(np.uint8), mode="P")
        png.putpalette(palette)
        png.save(root / "SegmentationClass" / f"{name}.png")
        names.append(name)
    (root / "ImageSets/Segmentation/train.txt").write_text("\n".join(names) + "\n")
    return root


def make_aligned_pairs(root, count: int = 300, size: int = 64, seed: int = 0) -> Path:
    from projects.pix2pix.datasets import SyntheticPairs

    folder = Path(root) / "train"
    folder.mkdir(parents=True, exist_ok=True)
    pairs = SyntheticPairs(num_samples=count, size=size, seed=seed)
    for index in range(count):
        source, target, _ = pairs.load_pair(index)
        _write_jpeg(folder / f"{index:06d}.jpg", np.concatenate([source, target], axis=1))
    return Path(root)

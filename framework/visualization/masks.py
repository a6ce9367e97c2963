"""Class maps for people and programs: palette PNG masks, colour overlays, RGB images on disk."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from PIL import Image


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
    write_bgr(path, cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def write_bgr(path: str | Path, pixels: np.ndarray) -> None:
    """Encode in memory, then write the bytes: a folder that cannot be written is an OSError
    naming the file and its cause (cv2.imwrite only returns False), shown as `error: <path>: <cause>`."""
    path = Path(path)
    encoded, data = cv2.imencode(path.suffix or ".png", pixels)
    if not encoded:
        raise ValueError(f"{path}: OpenCV cannot encode an image of shape {pixels.shape} as {path.suffix or '.png'}")
    path.write_bytes(data.tobytes())

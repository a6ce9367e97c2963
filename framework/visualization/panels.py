"""Images for people: side-by-side panels and PNG files (tasks' visualize / save_visuals)."""

from __future__ import annotations

from pathlib import Path

import cv2
import torch

from framework.visualization.masks import write_bgr


def side_by_side(*images: torch.Tensor) -> torch.Tensor:
    """N x C x H x W images of equal height joined along the width: N x C x H x (W1 + W2 + ...)."""
    return torch.cat(images, dim=3)


def stack_rows(panels: torch.Tensor, max_rows: int | None = None) -> torch.Tensor:
    """N x C x H x W panels -> one C x (n H) x W image, a row per panel (the first `max_rows`)."""
    return torch.cat(list(panels[:max_rows]), dim=1)


def write_png(path: str | Path, image: torch.Tensor) -> None:
    """Write a 3 x H x W RGB image: uint8, or float in [0, 1]."""
    if image.is_floating_point():
        image = (image.clamp(0, 1) * 255).round().byte()
    pixels = image.permute(1, 2, 0).cpu().numpy()
    write_bgr(path, cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))


def write_named_pngs(folder: str | Path, names, images: torch.Tensor) -> None:
    """One `<stem of name>.png` per image of a batch, in `folder` (created)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, image in zip(names, images):
        write_png(folder / f"{Path(str(name)).stem}.png", image)

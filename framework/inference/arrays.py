"""Between the arrays tools/infer.py reads and writes (H x W x C, 0..255) and the tensors networks
take and give (N x C x H x W)."""

from __future__ import annotations

import numpy as np
import torch


def to_tensor(images: list[np.ndarray], device: torch.device) -> torch.Tensor:
    """Same-size H x W x C arrays -> one contiguous N x C x H x W batch (NCHW end to end: a
    permuted view would take slow convolution paths on the CPU)."""
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous().to(device)


def rgb_view(image: np.ndarray) -> np.ndarray:
    """H x W x C on the 0..255 scale as uint8 RGB for an overlay: the first three channels, or the
    first as grey when there are fewer (as the task's panels show N-channel data)."""
    view = image[..., :3] if image.shape[2] >= 3 else np.repeat(image[..., :1], 3, axis=2)
    return view if view.dtype == np.uint8 else np.clip(view, 0, 255).astype(np.uint8)


def to_uint8(image: torch.Tensor) -> np.ndarray:
    """3 x H x W float in [0, 1] -> H x W x 3 uint8."""
    return (image.float() * 255).round().byte().permute(1, 2, 0).cpu().numpy()

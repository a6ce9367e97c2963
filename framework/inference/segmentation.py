"""Segmentation logits for images of any size: whole or sliding-window, with flip and
multi-scale test-time augmentation.

Any input side works: the network sees its input padded (bottom and right, with zeros after
normalisation, i.e. the mean colour) to a multiple of its size divisor, and the logits are
cropped back. In slide mode the image is cut into `crop`-size tiles every `stride` pixels (the
last tile of a row or column is aligned to the border, so tiles cover the image exactly), run
`tile_batch` tiles at a time, and each pixel's logits are averaged over the tiles covering it:
besides the image and its logits, memory holds one batch of tiles, whatever the image size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from framework.inference.settings import InferenceSettings, network_size_divisor


def tile_starts(length: int, crop: int, stride: int) -> list[int]:
    """Offsets of crop-size windows every `stride` along `length`, the last one flush with the end."""
    if length <= crop:
        return [0]
    starts = list(range(0, length - crop, stride))
    return starts + [length - crop]


def pad_to_multiple(x: torch.Tensor, divisor: int) -> torch.Tensor:
    """Zero-pad the bottom and right of N x C x H x W so both sides are multiples of `divisor`."""
    height, width = x.shape[-2:]
    pad_h, pad_w = -height % divisor, -width % divisor
    if pad_h == 0 and pad_w == 0:
        return x
    return F.pad(x, (0, pad_w, 0, pad_h))


class SegmentationPredictor:
    """`logits(images)` and `predict(images)` for a segmentation network.

    images: N x 3 x H x W, uint8 RGB (as datasets yield them) or already-normalised floats when
    `normalize` is None. Logits come back as float32 N x C x H x W at the input's size (float64
    when the network computes in float64).
    """

    def __init__(self, model: nn.Module, settings: InferenceSettings | None = None,
                 normalize: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.model = model
        self.settings = settings or InferenceSettings()
        self.normalize = normalize
        divisor = self.settings.size_divisor
        self.size_divisor = network_size_divisor(model) if divisor == "auto" else divisor

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """N x H x W class ids (one logit channel: a binary segmenter, logit > 0)."""
        return self.labels(self.logits(images))

    @staticmethod
    def labels(logits: torch.Tensor) -> torch.Tensor:
        """N x C x H x W logits -> N x H x W class ids: the argmax, or logit > 0 for one channel."""
        if logits.shape[1] == 1:
            return (logits[:, 0] > 0).long()
        return logits.argmax(dim=1)

    @torch.no_grad()
    def logits(self, images: torch.Tensor) -> torch.Tensor:
        return self.differentiable_logits(images)

    def differentiable_logits(self, images: torch.Tensor) -> torch.Tensor:
        """`logits` with the autograd graph kept (saliency): padding, scales, flips and tiles all
        pass gradients back to `images` at their own size."""
        x = self.normalize(images) if self.normalize is not None else images
        size = x.shape[-2:]
        total = None
        views = 0
        for scale in self.settings.scales:
            scaled = x if scale == 1.0 else F.interpolate(x, scale_factor=scale, mode="bilinear",
                                                          align_corners=False)
            for flip in (False, True) if self.settings.flip else (False,):
                out = self._forward(scaled.flip(-1) if flip else scaled)
                out = out.flip(-1) if flip else out
                if out.shape[-2:] != size:
                    out = F.interpolate(out, size=size, mode="bilinear", align_corners=False)
                total = out if total is None else total + out
                views += 1
        return total / views if views > 1 else total

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.settings.mode == "slide":
            return self._slide(x)
        return self._padded(x)

    def _padded(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        out = self.model(pad_to_multiple(x, self.size_divisor))
        out = out[..., :height, :width]
        return out if out.dtype == torch.float64 else out.float()

    def _slide(self, x: torch.Tensor) -> torch.Tensor:
        (crop_h, crop_w), (stride_h, stride_w) = self.settings.crop, self.settings.stride
        height, width = x.shape[-2:]
        windows = [(top, left) for top in tile_starts(height, crop_h, stride_h)
                   for left in tile_starts(width, crop_w, stride_w)]
        result = None
        for index, image in enumerate(x):  # one image at a time: tiles of several never pile up
            for first in range(0, len(windows), self.settings.tile_batch):
                chunk = windows[first:first + self.settings.tile_batch]
                tiles = torch.stack([image[:, top:top + crop_h, left:left + crop_w] for top, left in chunk])
                logits = self._padded(tiles)
                if result is None:  # the only image-sized buffers: the summed logits and a count
                    result = logits.new_zeros(x.shape[0], logits.shape[1], height, width)
                if first == 0:  # a new count per image: the division's backward (saliency) keeps each one
                    count = logits.new_zeros(1, height, width)
                for (top, left), tile in zip(chunk, logits):
                    h, w = tile.shape[-2:]
                    result[index, :, top:top + h, left:left + w] += tile
                    count[:, top:top + h, left:left + w] += 1
            result[index].div_(count)
        return result

"""Saliency maps: the gradient of a score with respect to the input pixels (Simonyan et al., 2013),
and SmoothGrad's average of that gradient over noisy copies of the input (Smilkov et al., 2017).

What is differentiated is a task's own: `task.saliency_score(...)` gives a function from N x C x H x W
pixels (floats on the 0..255 scale, the user's image at its own size) to a score map N x H x W
(summed over `region`: an H x W boolean mask, a box (x0, y0, x1, y1) or everything) or to one
score per item (N,). Whatever the task does before its network (normalising, padding to the size
divisor, resizing for scales, flipping, sliding-window tiles) is inside that function, so the
gradient flows back through it to the pixels the user gave.

SmoothGrad: copy k of item i is the image plus Gaussian noise of standard deviation `noise` x (the
image's max - min), as the authors' reference implementation (PAIR-code/saliency, `stdev_spread`)
scales it; the noise is drawn from (seed, k, item key) alone (framework/inference/noise.py), so an
item's map never depends on the batch it shares or its size. The defaults, 25 copies of 15% noise,
are that implementation's (the paper finds 10-20% noise and 25-50 copies work best).

The heatmap, as the authors' code shows a map (`VisualizeImageGrayscale`): the absolute gradient
summed over the channels, capped at its 99th percentile (a few extreme pixels would otherwise
leave the rest black) and scaled to [0, 1]. The raw gradient stays available beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from framework.errors import ConfigError
from framework.inference.noise import noise_seed

METHODS = ("gradient", "smoothgrad")
DEFAULT_SAMPLES = 25
DEFAULT_NOISE = 0.15
CAP_PERCENTILE = 99

ScoreMap = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Saliency:
    """One image's saliency: `heatmap` H x W float32 in [0, 1] for display; `gradient` C x H x W,
    d score / d pixel on the 0..255 scale (SmoothGrad: averaged over the noisy copies); `score`
    the target's score on the image itself."""

    heatmap: np.ndarray
    gradient: np.ndarray
    score: float


def check_method(method: str, samples: int, noise: float, seed: int = 0) -> None:
    if method not in METHODS:
        raise ConfigError(f"saliency method: one of {METHODS}, got {method!r}")
    # checked whatever the method: a value gradient does not use would be wrong under smoothgrad too
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise ConfigError(f"saliency samples: SmoothGrad needs an integer >= 1 of noisy copies, got {samples!r}")
    if isinstance(noise, bool) or not (isinstance(noise, (int, float)) and 0 <= noise < float("inf")):
        raise ConfigError(f"saliency noise: a fraction >= 0 of the image's range, got {noise!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise ConfigError(f"saliency seed: an integer in [0, 2**63), got {seed!r}")


def region_mask(region, height: int, width: int) -> np.ndarray | None:
    """`region` as an H x W boolean mask: None (the whole image), a mask of the image's size, or a
    box (x0, y0, x1, y1) in pixels, end exclusive; a ConfigError naming what does not fit."""
    if region is None:
        return None
    array = np.asarray(region)
    if array.dtype == bool:
        if array.shape != (height, width):
            raise ConfigError(f"saliency region: a mask of shape {array.shape}, the image is {height} x {width}")
        if not array.any():
            raise ConfigError("saliency region: the mask selects no pixel")
        return array
    if array.shape != (4,) or not np.issubdtype(array.dtype, np.integer):
        got = f"{array.dtype} values of shape {array.shape}" if isinstance(region, np.ndarray) else repr(region)[:60]
        raise ConfigError(f"saliency region: an H x W boolean mask or a box (x0, y0, x1, y1) of ints, got {got}"
                          + (" (a 0/1 mask: region.astype(bool))" if array.ndim == 2 else ""))
    x0, y0, x1, y1 = (int(v) for v in array)
    if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
        raise ConfigError(f"saliency region: box {(x0, y0, x1, y1)} is empty or outside the {width} x {height} image "
                          "(x0 < x1 <= width, y0 < y1 <= height)")
    mask = np.zeros((height, width), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


def item_scores(scores: torch.Tensor, mask: np.ndarray | None) -> torch.Tensor:
    """N scores: a score map N x H x W summed over the mask (all of it without one), or N already."""
    if scores.dim() == 1:
        if mask is not None:
            raise ConfigError("saliency region: this target is one number per image (the discriminator's verdict); "
                              "a region is for a class's logits or the output's pixels")
        return scores
    if mask is None:
        return scores.flatten(1).sum(dim=1)
    return scores[:, torch.from_numpy(mask).to(scores.device)].sum(dim=1)


def smoothgrad_noise(pixels: torch.Tensor, copy: int, seed: int, keys: Sequence[int | str],
                     noise: float) -> torch.Tensor:
    """Copy `copy`'s noise for each item: standard normal from (seed, copy, key), times `noise` x
    the item's range (max - min)."""
    rows = [torch.randn(*pixels.shape[1:], generator=torch.Generator().manual_seed(noise_seed(seed, copy, key)))
            for key in keys]
    spread = (pixels.flatten(1).amax(dim=1) - pixels.flatten(1).amin(dim=1)).detach() * noise
    return torch.stack(rows).to(pixels) * spread.view(-1, 1, 1, 1)


def input_gradients(score_map: ScoreMap, pixels: torch.Tensor, region=None, method: str = "gradient",
                    samples: int = DEFAULT_SAMPLES, noise: float = DEFAULT_NOISE, seed: int = 0,
                    keys: Sequence[int | str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(d score / d pixels N x C x H x W, the scores N on the pixels themselves) of same-size
    floating-point pixels. The items of a batch are independent (an evaluation-mode network), so
    the gradient of the scores' sum is each item's own."""
    check_method(method, samples, noise, seed)
    mask = region_mask(region, *pixels.shape[-2:])
    keys = list(range(len(pixels))) if keys is None else list(keys)

    def gradient_at(inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = inputs.detach().requires_grad_(True)
        with torch.enable_grad():
            scores = item_scores(score_map(inputs), mask)
            (gradient,) = torch.autograd.grad(scores.sum(), inputs)
        return gradient, scores.detach()

    if method == "gradient":
        return gradient_at(pixels)
    with torch.no_grad():
        clean = item_scores(score_map(pixels), mask)
    total = torch.zeros_like(pixels)
    for copy in range(samples):
        total += gradient_at(pixels + smoothgrad_noise(pixels, copy, seed, keys, noise))[0]
    return total / samples, clean


def heatmap(gradient: np.ndarray) -> np.ndarray:
    """C x H x W gradient -> H x W float32 in [0, 1]: |gradient| summed over the channels, capped at
    its 99th percentile (its maximum when that is no higher than its minimum), min-max scaled."""
    magnitude = np.abs(gradient).sum(axis=0)
    low, top = magnitude.min(), np.percentile(magnitude, CAP_PERCENTILE)
    if top <= low:
        top = magnitude.max()
    if top <= low:  # a flat map (the target does not depend on the pixels)
        return np.zeros(magnitude.shape, dtype=np.float32)
    return np.clip((magnitude - low) / (top - low), 0, 1).astype(np.float32)


def saliencies(gradients: torch.Tensor, scores: torch.Tensor) -> list[Saliency]:
    return [Saliency(heatmap(gradient), gradient, float(score))
            for gradient, score in zip(gradients.cpu().numpy(), scores.cpu().tolist())]

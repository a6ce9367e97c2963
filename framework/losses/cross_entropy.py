"""Softmax cross-entropy for segmentation (`CrossEntropyLoss`), with class weights, label
smoothing and online hard example mining (`OHEM`); its mean computed from one kernel.

Ignored pixels count nowhere (framework/losses/pixel_base.py): an all-ignored batch gives 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from framework.losses.pixel_base import _AutoWeighted, _safe_mean
from framework.registry import LOSSES


class OHEM:
    """Online hard example mining over pixels (as mmsegmentation's OHEMPixelSampler): the loss
    is averaged over the hard pixels only. A pixel's hardness is the softmax probability of its
    true class (lower: harder). Kept: every valid pixel whose probability is below `thresh`,
    and in any case the `min_kept` x (images in the batch) hardest valid pixels (all of them
    when there are fewer). Without `thresh`: exactly those top-k hardest pixels.
    """

    def __init__(self, min_kept: int, thresh: float | None = None):
        if isinstance(min_kept, bool) or not isinstance(min_kept, int) or min_kept < 1:
            raise ValueError(f"ohem.min_kept must be an integer >= 1 (pixels per image), got {min_kept!r}")
        if thresh is not None and not 0.0 < thresh <= 1.0:
            raise ValueError(f"ohem.thresh must be in (0, 1] or null, got {thresh!r}")
        self.min_kept, self.thresh = min_kept, thresh

    @torch.no_grad()
    def keep(self, logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The pixels (N x H x W bool) the loss is averaged over; no host sync."""
        probs = logits.float().softmax(dim=1).gather(1, torch.where(valid, target, 0).unsqueeze(1))[:, 0]
        probs = torch.where(valid, probs, torch.inf)  # ignored pixels sort last and are never kept
        k = min(self.min_kept * target.shape[0], probs.numel())
        hardest = torch.zeros_like(valid).view(-1)
        hardest[probs.view(-1).topk(k, largest=False).indices] = True
        kept = hardest.view_as(valid)
        if self.thresh is not None:
            kept |= probs < self.thresh
        return kept & valid


@LOSSES.register()
class CrossEntropyLoss(_AutoWeighted, nn.Module):
    """Softmax cross-entropy; logits N x C x H x W, target N x H x W int64 class ids.

    `weight` (one float per class) is a non-persistent buffer: it follows `.to(device)` but is
    configuration, not state, so it stays out of checkpoints. `weight: auto` computes it from
    the training masks by `weight_method` (median_frequency or inverse_log).

    `ohem: {thresh: 0.7, min_kept: 10000}` averages the loss over the hard pixels only (see `OHEM`).

    `avg_non_ignore` (mmseg's name): true (the default, torch's "mean") divides the summed loss by
    the non-ignored pixels (their summed class weight); false divides it by every pixel of the
    batch, ignored ones included, as mmseg's CrossEntropyLoss does by default (avg_non_ignore=False,
    mmseg/models/losses/cross_entropy_loss.py): half the pixels ignored, half the loss and the step.
    """

    name = "ce"

    def __init__(self, weight: list[float] | str | None = None, ignore_index: int = 255,
                 label_smoothing: float = 0.0, weight_method: str = "median_frequency", ohem: dict | None = None,
                 avg_non_ignore: bool = True):
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        if not isinstance(avg_non_ignore, bool):
            raise ValueError(f"avg_non_ignore must be true or false, got {avg_non_ignore!r}")
        self.avg_non_ignore = avg_non_ignore
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.ohem = OHEM(**ohem) if ohem is not None else None
        auto = self._init_auto(weight, weight_method)
        class_weight = None if weight is None or auto else torch.as_tensor(weight, dtype=torch.float32)
        self.register_buffer("weight", class_weight, persistent=False)

    def set_class_weights(self, weights: torch.Tensor) -> None:
        self.weight = weights.float()

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        weight = self.weight  # one module attribute lookup, not four: this runs every step
        self._require_weights(weight is not None)
        if weight is not None and weight.numel() != logits.shape[1]:
            raise ValueError(f"{self.name}: {weight.numel()} class weights for {logits.shape[1]} classes")
        if self.ohem is not None:
            valid = self.ohem.keep(logits, target, target != self.ignore_index)
            target = torch.where(valid, target, self.ignore_index)  # the easy pixels count nowhere
        if self.label_smoothing == 0.0:
            # In float32 at least, as F.cross_entropy computes under autocast.
            log_probs = F.log_softmax(logits if logits.element_size() >= 4 else logits.float(),
                                      dim=1 if logits.dim() > 1 else 0)  # 0: one unbatched sample
            if weight is not None and weight.dtype != log_probs.dtype:
                weight = weight.to(log_probs.dtype)
            if not self.avg_non_ignore:
                return _nll_sum(log_probs, target, weight, self.ignore_index)[0] / max(target.numel(), 1)
            return _nll_mean(log_probs, target, weight, self.ignore_index)
        total = F.cross_entropy(logits, target, weight=weight, ignore_index=self.ignore_index,
                                label_smoothing=self.label_smoothing, reduction="sum")
        if not self.avg_non_ignore:
            return total / max(target.numel(), 1)
        # F.cross_entropy's "mean" divides by the summed weight of the non-ignored pixels.
        valid = target != self.ignore_index
        if weight is None:
            return _safe_mean(total, valid.sum().to(total.dtype))
        return _safe_mean(total, (weight[torch.where(valid, target, 0)] * valid).sum().to(total.dtype))


_SUM = 2  # torch's reduction code for "sum" (torch.nn._reduction.get_enum("sum"))


def _nll_mean(log_probs: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
              ignore_index: int) -> torch.Tensor:
    """The negative log-likelihood averaged over the non-ignored pixels (weighted: divided by
    their summed class weight), 0 with zero gradients when no pixel counts.

    On the CPU, torch's own "mean", whose one failure, 0/0 = NaN when no pixel counts, is seen by
    reading the loss back: free there (no device to wait for), and the division and its backward
    are then no separate operations (forward and backward of a 4 x 4 x 16 x 16 batch: 65 -> 49 us).
    A NaN from the logits themselves stays NaN below, for the non-finite guard to see. On a GPU
    the read would be a sync each step: the sum, divided by the weight clamped away from 0, costs
    two small kernels instead."""
    if log_probs.device.type == "cpu":
        mean = F.nll_loss(log_probs, target, weight, ignore_index=ignore_index)
        if not math.isnan(mean.item()):
            return mean
    return _nll_mean_without_sync(log_probs, target, weight, ignore_index)


def _nll_mean_without_sync(log_probs: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                           ignore_index: int) -> torch.Tensor:
    """`_nll_mean` with nothing read back: the GPU's path (tests run it on the CPU too)."""
    total, weight_sum = _nll_sum(log_probs, target, weight, ignore_index)
    return _safe_mean(total, weight_sum)


def _nll_sum(log_probs: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
             ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed negative log-likelihood of the non-ignored pixels and their summed class weight
    (their count without weights), from one kernel: torch's nll_loss computes that weight for its
    "mean" anyway, and taking it from there saves the mask, the count and the gather that
    computing it again costs each step (forward and backward of a 4 x 4 x 16 x 16 batch: 86 -> 71 us)."""
    if log_probs.dim() == 1:  # one unbatched sample: C logits, a 0-d target
        log_probs, target = log_probs.unsqueeze(0), target.unsqueeze(0)
    if log_probs.dim() == 2:  # N x C
        return torch.ops.aten.nll_loss_forward(log_probs, target, weight, _SUM, ignore_index)
    if log_probs.dim() != 4:  # N x C x d1 x ... as N x C x 1 x (d1 x ...), as F.nll_loss does
        log_probs = log_probs.reshape(log_probs.shape[0], log_probs.shape[1], 1, -1)
        target = target.reshape(target.shape[0], 1, -1)
    return torch.ops.aten.nll_loss2d_forward(log_probs, target, weight, _SUM, ignore_index)

"""Segmentation losses: `forward(logits, target) -> scalar`, each with a short `name` for logs.

Pixels labelled `ignore_index` count nowhere: neither in the loss nor in its normalisation.
A batch whose pixels are all ignored gives a loss of 0 with zero gradients, instead of the
0/0 = NaN that `F.cross_entropy(reduction="mean")` would return and that would poison the weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from framework.registry import LOSSES


def _safe_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    # count is 0 only when every pixel is ignored, and then total is 0 as well.
    return total / count.clamp_min(torch.finfo(total.dtype).tiny)


AUTO_WEIGHT_METHODS = ("median_frequency", "inverse_log")


class _AutoWeighted:
    """`weight: auto`: the loss waits for class weights computed from the training masks
    (framework/analysis/class_weights.py, called when the trainer is built)."""

    auto_weight_method: str | None = None

    def _init_auto(self, value, method: str) -> bool:
        """True when `value` asks for weights from the data; checks `method`."""
        if method not in AUTO_WEIGHT_METHODS:
            raise ValueError(f"weight_method: one of {AUTO_WEIGHT_METHODS}, got {method!r}")
        if isinstance(value, str):
            if value != "auto":
                raise ValueError(f"a class weight must be numbers or 'auto', got {value!r}")
            self.auto_weight_method = method
            return True
        return False

    def _require_weights(self, present: bool) -> None:
        if self.auto_weight_method and not present:
            raise RuntimeError(f"{type(self).__name__}: weight 'auto' has not been computed from the training "
                               "data (tools/train.py does it when it builds the run)")


def _binary_logits(logits: torch.Tensor, loss_name: str) -> torch.Tensor:
    """N x 1 x H x W or N x H x W logits -> N x H x W."""
    if logits.dim() == 4:
        if logits.shape[1] != 1:
            raise ValueError(
                f"{loss_name} expects one logit channel (N x 1 x H x W), got {tuple(logits.shape)}; "
                "use a multiclass loss for several classes"
            )
        return logits[:, 0]
    return logits


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
    """

    name = "ce"

    def __init__(self, weight: list[float] | str | None = None, ignore_index: int = 255,
                 label_smoothing: float = 0.0, weight_method: str = "median_frequency", ohem: dict | None = None):
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
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
            return _nll_mean(log_probs, target, weight, self.ignore_index)
        total = F.cross_entropy(logits, target, weight=weight, ignore_index=self.ignore_index,
                                label_smoothing=self.label_smoothing, reduction="sum")
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


@LOSSES.register()
class BCEWithLogitsLoss(_AutoWeighted, nn.Module):
    """Binary cross-entropy on logits (stable, autocast-safe) for binary masks.

    logits N x 1 x H x W or N x H x W; target N x H x W holding 0, 1 or `ignore_index`.
    `pos_weight` (a float) scales the loss of foreground pixels; `pos_weight: auto` takes the
    ratio of the foreground's and background's class weights from the training masks.
    """

    name = "bce"

    def __init__(self, pos_weight: float | str | None = None, ignore_index: int = 255,
                 weight_method: str = "median_frequency"):
        super().__init__()
        self.ignore_index = ignore_index
        auto = self._init_auto(pos_weight, weight_method)
        positive_weight = None if pos_weight is None or auto else torch.tensor(float(pos_weight))
        self.register_buffer("pos_weight", positive_weight, persistent=False)

    def set_class_weights(self, weights: torch.Tensor) -> None:
        if weights.numel() != 2 or weights[0] <= 0:
            raise ValueError(f"pos_weight: auto needs a 2-class dataset with background pixels, got weights {weights.tolist()}")
        self.pos_weight = (weights[1] / weights[0]).float()

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self._require_weights(self.pos_weight is not None)
        logits = _binary_logits(logits, type(self).__name__)
        valid = target != self.ignore_index
        per_pixel = F.binary_cross_entropy_with_logits(
            logits,
            torch.where(valid, target, 0).to(logits.dtype),
            pos_weight=self.pos_weight,
            reduction="none",
        )
        return _safe_mean((per_pixel * valid).sum(), valid.sum().to(per_pixel.dtype))


@LOSSES.register()
class DiceLoss(_AutoWeighted, nn.Module):
    """1 - Dice coefficient of the predicted probabilities, over the whole batch.

    "multiclass": softmax over N x C x H x W logits, one Dice per class, averaged over all
    classes (a class absent from both target and prediction scores close to 1, thanks to
    `smooth`). "binary": sigmoid of N x 1 x H x W (or N x H x W) logits, one Dice.
    `class_weight` (multiclass: one float per class, or `auto` from the training masks) makes
    the average over classes a weighted one.
    """

    name = "dice"
    modes = ("multiclass", "binary")

    def __init__(self, mode: str = "multiclass", ignore_index: int = 255, smooth: float = 1.0,
                 class_weight: list[float] | str | None = None, weight_method: str = "median_frequency"):
        super().__init__()
        if mode not in self.modes:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(map(repr, self.modes))}")
        self.mode = mode
        self.ignore_index = ignore_index
        self.smooth = smooth
        auto = self._init_auto(class_weight, weight_method)
        if class_weight is not None and mode == "binary":
            raise ValueError("class_weight: binary Dice has one class; weigh classes in multiclass mode")
        weight = None if class_weight is None or auto else torch.as_tensor(class_weight, dtype=torch.float32)
        self.register_buffer("class_weight", weight, persistent=False)

    def set_class_weights(self, weights: torch.Tensor) -> None:
        self.class_weight = weights.float()

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        valid = target != self.ignore_index
        target = torch.where(valid, target, 0)
        # float32 sums: under float16 autocast a sum over a batch of pixels overflows 65504.
        logits = logits.float()
        if self.mode == "binary":
            probs = torch.sigmoid(_binary_logits(logits, type(self).__name__))
            truth = target.to(probs.dtype)
            pixel_dims: tuple[int, ...] = (0, 1, 2)
        else:
            probs = logits.softmax(dim=1)
            truth = F.one_hot(target, logits.shape[1]).permute(0, 3, 1, 2).to(probs.dtype)
            valid = valid.unsqueeze(1)
            pixel_dims = (0, 2, 3)
        probs, truth = probs * valid, truth * valid
        intersection = (probs * truth).sum(pixel_dims)
        cardinality = probs.sum(pixel_dims) + truth.sum(pixel_dims)
        dice = (2 * intersection + self.smooth) / (cardinality + self.smooth)
        self._require_weights(self.class_weight is not None)
        if self.class_weight is not None:
            weight = self.class_weight.to(dice.device)
            return 1 - (dice * weight).sum() / weight.sum()
        return 1 - dice.mean()


@LOSSES.register()
class CombinedLoss(nn.Module):
    """Weighted sum of built losses, e.g. 1.0 * ce + 0.5 * dice.

    `terms()` returns each weighted term under `loss_<name>` for logging (loss_ce, loss_dice;
    a repeated name gets a suffix: loss_ce, loss_ce_1); forward is their sum.
    """

    name = "loss"

    def __init__(self, losses: list[nn.Module], weights: list[float] | None = None):
        super().__init__()
        if not losses or not all(isinstance(loss, nn.Module) for loss in losses):
            raise ValueError(f"losses must be a non-empty list of loss nodes, got {losses!r}")
        if weights is None:
            weights = [1.0] * len(losses)
        if len(weights) != len(losses):
            raise ValueError(f"{len(losses)} losses but {len(weights)} weights; give one weight per loss")
        self.losses = nn.ModuleList(losses)
        self.weights = [float(w) for w in weights]
        self.term_names = _unique_names([f"loss_{getattr(loss, 'name', type(loss).__name__.lower())}" for loss in losses])

    def terms(self, logits: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            term: weight * loss(logits, target)
            for term, weight, loss in zip(self.term_names, self.weights, self.losses)
        }

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return sum(self.terms(logits, target).values())


def _unique_names(names: list[str]) -> list[str]:
    unique: list[str] = []
    for name in names:
        candidate, suffix = name, 0
        while candidate in unique:
            suffix += 1
            candidate = f"{name}_{suffix}"
        unique.append(candidate)
    return unique

"""Segmentation losses: `forward(logits, target) -> scalar`, each with a short `name` for logs:
`BCEWithLogitsLoss`, `DiceLoss`, `CombinedLoss` here; `CrossEntropyLoss` (with `OHEM`) in
cross_entropy.py, focal/Tversky/Lovasz in hard_pixels.py.

Pixels labelled `ignore_index` count nowhere (framework/losses/pixel_base.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# CrossEntropyLoss and OHEM lived here until 0.3.0: their old import path keeps working.
from framework.losses.cross_entropy import OHEM, CrossEntropyLoss  # noqa: F401
from framework.losses.pixel_base import _AutoWeighted, _binary_logits, _safe_mean
from framework.registry import LOSSES


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

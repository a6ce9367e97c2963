"""Losses for imbalanced classes, thin structures and hard pixels: Focal, Tversky, Lovasz.

Each takes `mode`:
  binary      logits N x 1 x H x W (or N x H x W), target N x H x W holding 0, 1 or ignore_index
  multiclass  logits N x C x H x W, target N x H x W class ids (or ignore_index)
  multilabel  logits N x C x H x W, target N x C x H x W holding 0, 1 or ignore_index (one
              independent sigmoid per channel; for tasks whose targets are multi-channel)
Pixels labelled `ignore_index` count nowhere. The definitions are those of
segmentation_models_pytorch (smp), so numbers carry over from there; docs/incoming/issue24.md
writes out each formula. Computed in float32 (sums over a batch of pixels overflow float16).
OHEM (online hard example mining) is an option of CrossEntropyLoss (`ohem:`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from framework.losses.pixel_base import _binary_logits, _safe_mean
from framework.registry import LOSSES

MODES = ("binary", "multiclass", "multilabel")


def _check_mode(mode: str, allowed: tuple[str, ...] = MODES) -> str:
    if mode not in allowed:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(map(repr, allowed))}")
    return mode


def _per_class(logits: torch.Tensor, target: torch.Tensor, mode: str, ignore_index: int, name: str):
    """(logits N x K x H x W float32, truth N x K x H x W in {0, 1}, valid N x K x H x W bool)
    with K = 1 (binary) or C: multiclass one-hot, multilabel as given; ignored pixels are 0 in truth."""
    logits = logits.float()
    if mode == "binary":
        if logits.dim() == 4 and logits.shape[1] != 1:  # a multi-class model: say which mode fits it
            raise ValueError(f"{name} mode: binary takes one logit channel (N x 1 x H x W), but the model gives "
                             f"{logits.shape[1]}; use mode: multiclass for class ids, multilabel for 0/1 maps per class")
        logits = _binary_logits(logits, name).unsqueeze(1)
        target = target.unsqueeze(1)
    valid = target != ignore_index
    if mode == "multiclass":
        truth = F.one_hot(torch.where(valid, target, 0), logits.shape[1]).permute(0, 3, 1, 2)
        valid = valid.unsqueeze(1).expand_as(logits)
    else:
        if target.dim() == 3 and logits.dim() == 4:  # class ids N x H x W: what a multiclass loss reads
            raise ValueError(f"{name} mode: multilabel takes a 0/1 target per class (N x C x H x W), but the target "
                             f"is class ids {tuple(target.shape)} for logits {tuple(logits.shape)}; use mode: "
                             "multiclass")
        if target.shape != logits.shape:
            raise ValueError(f"{name} ({mode}): target {tuple(target.shape)} does not match logits {tuple(logits.shape)}")
        truth = target
    return logits, (truth * valid).to(logits.dtype), valid


@LOSSES.register()
class FocalLoss(nn.Module):
    """Focal loss (Lin et al. 2017): binary cross-entropy scaled by (1 - p_t)^gamma, so pixels the
    network already gets right count little. p_t = sigmoid(logit) for a positive, 1 - that for
    a negative; `alpha` weighs positives by alpha and negatives by 1 - alpha (None: no weighting).

    As in smp, multiclass is one sigmoid per class against the rest: the per-class means over
    the valid pixels, summed over classes. Binary and multilabel: the mean over valid elements.
    """

    name = "focal"

    def __init__(self, mode: str = "multiclass", alpha: float | None = None, gamma: float = 2.0,
                 ignore_index: int = 255):
        super().__init__()
        self.mode = _check_mode(mode)
        if alpha is not None and not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1] or null, got {alpha}")
        if not gamma >= 0:
            raise ValueError(f"gamma must be >= 0, got {gamma}")
        self.alpha, self.gamma, self.ignore_index = alpha, float(gamma), ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits, truth, valid = _per_class(logits, target, self.mode, self.ignore_index, type(self).__name__)
        bce = F.binary_cross_entropy_with_logits(logits, truth, reduction="none")
        p_t = torch.exp(-bce)
        loss = (1 - p_t).pow(self.gamma) * bce
        if self.alpha is not None:
            loss = loss * (self.alpha * truth + (1 - self.alpha) * (1 - truth))
        loss = loss * valid
        if self.mode == "multiclass":  # sum over classes of each class's mean over the valid pixels
            return _safe_mean(loss.sum(), valid[:, 0].sum().to(loss.dtype))
        return _safe_mean(loss.sum(), valid.sum().to(loss.dtype))


@LOSSES.register()
class TverskyLoss(nn.Module):
    """Tversky loss (Salehi et al. 2017), smp's definition: per class, over the whole batch,

        score = (TP + smooth) / max(TP + alpha * FP + beta * FN + smooth, eps)

    with soft counts from the probabilities (softmax for multiclass, sigmoid otherwise); the
    loss of a class is 1 - score (or -log(score) with `log_loss`), 0 for a class absent from the
    batch's target; the result is the mean over classes, raised to `gamma` (focal Tversky).
    alpha = beta = 0.5 is the Dice loss; beta > alpha penalises missed pixels (thin structures)
    more than false alarms.
    """

    name = "tversky"

    def __init__(self, mode: str = "multiclass", alpha: float = 0.5, beta: float = 0.5, gamma: float = 1.0,
                 smooth: float = 0.0, eps: float = 1e-7, log_loss: bool = False, ignore_index: int = 255):
        super().__init__()
        self.mode = _check_mode(mode)
        for key, value in (("alpha", alpha), ("beta", beta), ("smooth", smooth), ("eps", eps)):
            if not value >= 0:
                raise ValueError(f"{key} must be >= 0, got {value}")
        if not gamma > 0:
            raise ValueError(f"gamma must be > 0, got {gamma}")
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        self.smooth, self.eps, self.log_loss, self.ignore_index = float(smooth), float(eps), log_loss, ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits, truth, valid = _per_class(logits, target, self.mode, self.ignore_index, type(self).__name__)
        probs = (logits.softmax(dim=1) if self.mode == "multiclass" else logits.sigmoid()) * valid
        dims = (0, 2, 3)
        tp = (probs * truth).sum(dims)
        fp = (probs * (1 - truth)).sum(dims)  # probs is 0 on ignored pixels, truth too
        fn = ((1 - probs) * truth).sum(dims)
        score = (tp + self.smooth) / (tp + self.alpha * fp + self.beta * fn + self.smooth).clamp_min(self.eps)
        loss = -torch.log(score.clamp_min(self.eps)) if self.log_loss else 1 - score
        loss = loss * (truth.sum(dims) > 0)  # a class absent from the target adds nothing
        return loss.mean().pow(self.gamma)


def lovasz_grad(truth_sorted: torch.Tensor) -> torch.Tensor:
    """The gradient of the Lovasz extension of the Jaccard loss for errors sorted in decreasing
    order (Berman et al. 2018, Alg. 1), along dim 0: the Jaccard loss of the first i errors
    minus that of the first i - 1."""
    positives = truth_sorted.sum(0)
    intersection = positives - truth_sorted.cumsum(0)
    union = positives + (1 - truth_sorted).cumsum(0)
    jaccard = 1 - intersection / union  # union >= 1 from the first element on
    return torch.cat([jaccard[:1], jaccard[1:] - jaccard[:-1]])


@LOSSES.register()
class LovaszLoss(nn.Module):
    """Lovasz loss (Berman et al. 2018): a convex surrogate that optimises the Jaccard index (IoU)
    directly. Binary and multilabel (smp: every element of the batch as one binary problem): the
    Lovasz hinge on the logits, errors max(0, 1 - logit * (2 y - 1)). Multiclass: the Lovasz
    softmax, errors |[y = c] - p_c| per class, averaged over the classes present in the target.
    `per_image`: the loss of each image apart, averaged (else one over the whole batch).
    """

    name = "lovasz"

    def __init__(self, mode: str = "multiclass", per_image: bool = False, ignore_index: int = 255):
        super().__init__()
        self.mode = _check_mode(mode)
        self.per_image, self.ignore_index = per_image, ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits, truth, valid = _per_class(logits, target, self.mode, self.ignore_index, type(self).__name__)
        if self.per_image:
            return torch.stack([self._loss(*parts) for parts in zip(logits, truth, valid)]).mean()
        return self._loss(logits, truth, valid)

    def _loss(self, logits: torch.Tensor, truth: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """One image (K x H x W) or a batch (N x K x H x W)."""
        classes = logits.shape[-3]
        if self.mode != "multiclass":  # the hinge over every valid element
            logits, truth = logits[valid], truth[valid]
            errors = 1 - logits * (2 * truth - 1)
            errors, order = errors.sort(descending=True)
            return (F.relu(errors) * lovasz_grad(truth[order])).sum()
        probs = logits.softmax(dim=-3).movedim(-3, -1).reshape(-1, classes)  # pixels x C
        pixel_valid = valid.movedim(-3, -1).reshape(-1, classes)[:, 0]
        probs, truth = probs[pixel_valid], truth.movedim(-3, -1).reshape(-1, classes)[pixel_valid]
        errors, order = (truth - probs).abs().sort(dim=0, descending=True)
        per_class = (errors * lovasz_grad(truth.gather(0, order))).sum(0)
        present = truth.sum(0) > 0
        return _safe_mean((per_class * present).sum(), present.sum().to(per_class.dtype))

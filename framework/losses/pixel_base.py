"""What every per-pixel segmentation loss shares: the mean over the pixels that count, the
`weight: auto` request, and the shape of binary logits.

Pixels labelled `ignore_index` count nowhere: neither in the loss nor in its normalisation.
A batch whose pixels are all ignored gives a loss of 0 with zero gradients, instead of the
0/0 = NaN that `F.cross_entropy(reduction="mean")` would return and that would poison the weights.
"""

from __future__ import annotations

import torch


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

"""Which way a metric improves, read from its name: the one place that decides it for
`train.best_mode: auto` (which checkpoint is best.pth) and for an EarlyStoppingHook without `rule`.

A name is looked up as written, then without its per-class part (`IoU.road` -> `IoU`), then
without its suffix (`PSNR_ab` -> `PSNR`, `SWD_16` -> `SWD`, `MS-SSIM_fake` -> `MS-SSIM`), case
aside. A name ending in `loss` is a loss. Any other name has no known direction: the config must
say it (`train.best_mode: max|min`, the hook's `rule: greater|less`).
"""

from __future__ import annotations

GREATER = ("mIoU", "IoU", "mAcc", "aAcc", "Acc", "accuracy", "mDice", "Dice", "PSNR", "SSIM", "MS-SSIM")
LESS = ("loss", "FID", "KID", "SWD", "L1")
_DIRECTIONS = {**{name.lower(): "greater" for name in GREATER}, **{name.lower(): "less" for name in LESS}}


def metric_direction(name: str) -> str | None:
    """'greater' when a greater value of metric `name` is better, 'less' when a smaller one is,
    None when the name does not tell."""
    whole = name.lower()
    per_class = whole.split(".", 1)[0]
    for candidate in (whole, per_class, per_class.split("_", 1)[0]):
        if candidate in _DIRECTIONS:
            return _DIRECTIONS[candidate]
    return "less" if per_class.endswith("loss") else None


def known_directions() -> str:
    """The names with a known direction, for messages and docs."""
    return f"greater: {', '.join(GREATER)}; less: {', '.join(LESS)}"

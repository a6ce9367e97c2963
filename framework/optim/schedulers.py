"""Learning-rate schedules, stepped once per iteration (one optimizer step).

Every torch.optim.lr_scheduler class is usable by name (its "epoch" counts iterations here).
The Warmup* schedules below are closed-form in the iteration, so a resumed run continues
the exact same curve:

    lr(it) = base_lr * warmup(it) * decay(it)

    warmup: "linear"   factor rises from warmup_factor to 1 over warmup_iters
            "constant" factor is warmup_factor for warmup_iters, then 1
            null       no warmup
    decay:  WarmupLR (none), WarmupMultiStepLR (gamma at each milestone),
            WarmupCosineLR (cosine to min_lr_ratio at max_iters),
            WarmupPolyLR ((1 - it/max_iters)^power, floored at min_lr_ratio; `floor: offset`:
                          min_lr_ratio + (1 - min_lr_ratio) (1 - it/max_iters)^power, mmengine's
                          PolyLR with eta_min = min_lr_ratio x lr, as mmseg's schedules use it)
            LinearDecayLR (1 until decay_start, then linearly to 0 at max_iters: the CycleGAN
                           schedule; decay_start an iteration, or a fraction of the run in (0, 1))

`max_iters` defaults to the run's train.max_iters.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping

import torch
from torch.optim.lr_scheduler import LRScheduler

from framework.errors import ConfigError
from framework.registry import SCHEDULERS, accepted_keywords


def _register_torch_schedulers() -> None:
    """Every torch.optim.lr_scheduler class by name (registered on first lookup)."""
    for name, cls in vars(torch.optim.lr_scheduler).items():
        if inspect.isclass(cls) and issubclass(cls, LRScheduler) and not name.startswith("_") \
                and cls is not LRScheduler:
            SCHEDULERS.add(cls, name)


SCHEDULERS.add_source(_register_torch_schedulers)


@SCHEDULERS.register()
class WarmupLR(LRScheduler):
    """A warmup followed by a constant learning rate; the base of the Warmup* family."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup: str | None = "linear",
                 warmup_iters: int = 0, warmup_factor: float = 0.001, last_epoch: int = -1):
        if warmup not in ("linear", "constant", None):
            raise ValueError(f"warmup must be 'linear', 'constant' or null, got {warmup!r}")
        if warmup_iters < 0 or not 0.0 <= warmup_factor <= 1.0:
            raise ValueError(f"need warmup_iters >= 0 and 0 <= warmup_factor <= 1, "
                             f"got {warmup_iters} and {warmup_factor}")
        self.warmup = warmup
        self.warmup_iters = warmup_iters
        self.warmup_factor = warmup_factor
        super().__init__(optimizer, last_epoch)

    def warmup_multiplier(self, it: int) -> float:
        if self.warmup is None or it >= self.warmup_iters:
            return 1.0
        if self.warmup == "constant":
            return self.warmup_factor
        return self.warmup_factor + (1.0 - self.warmup_factor) * it / self.warmup_iters

    def decay(self, it: int) -> float:
        return 1.0

    def get_lr(self) -> list[float]:
        factor = self.warmup_multiplier(self.last_epoch) * self.decay(self.last_epoch)
        return [base_lr * factor for base_lr in self.base_lrs]


@SCHEDULERS.register()
class WarmupMultiStepLR(WarmupLR):
    def __init__(self, optimizer, milestones: list[int], gamma: float = 0.1, warmup: str | None = "linear",
                 warmup_iters: int = 0, warmup_factor: float = 0.001, last_epoch: int = -1):
        self.milestones = sorted(milestones)
        self.gamma = gamma
        super().__init__(optimizer, warmup, warmup_iters, warmup_factor, last_epoch)

    def decay(self, it: int) -> float:
        return self.gamma ** sum(1 for m in self.milestones if it >= m)


@SCHEDULERS.register()
class WarmupCosineLR(WarmupLR):
    def __init__(self, optimizer, max_iters: int, min_lr_ratio: float = 0.0, warmup: str | None = "linear",
                 warmup_iters: int = 0, warmup_factor: float = 0.001, last_epoch: int = -1):
        self.max_iters = max_iters
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, warmup, warmup_iters, warmup_factor, last_epoch)

    def decay(self, it: int) -> float:
        progress = min(it / self.max_iters, 1.0)
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@SCHEDULERS.register()
class WarmupPolyLR(WarmupLR):
    """`floor: max` clamps the poly curve at min_lr_ratio (it reaches the floor before the end);
    `floor: offset` lifts the whole curve onto it, as mmengine's PolyLR does with eta_min (its
    step-by-step update has this closed form): the two differ by up to min_lr_ratio x lr."""

    FLOORS = ("max", "offset")

    def __init__(self, optimizer, max_iters: int, power: float = 0.9, min_lr_ratio: float = 0.0,
                 warmup: str | None = "linear", warmup_iters: int = 0, warmup_factor: float = 0.001,
                 last_epoch: int = -1, floor: str = "max"):
        if floor not in self.FLOORS:
            raise ValueError(f"floor must be one of {', '.join(self.FLOORS)}, got {floor!r}")
        self.max_iters = max_iters
        self.power = power
        self.min_lr_ratio = min_lr_ratio
        self.floor = floor
        super().__init__(optimizer, warmup, warmup_iters, warmup_factor, last_epoch)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if state.get("floor") == "max":  # the default: a checkpoint as before the option, key for key
            del state["floor"]
        return state

    def decay(self, it: int) -> float:
        progress = min(it / self.max_iters, 1.0)
        if self.floor == "offset":
            return self.min_lr_ratio + (1 - self.min_lr_ratio) * (1 - progress) ** self.power
        return max((1 - progress) ** self.power, self.min_lr_ratio)


@SCHEDULERS.register()
class LinearDecayLR(WarmupLR):
    """Constant until `decay_start`, then linear decay to 0 at `max_iters` (the original
    CycleGAN's n_epochs then n_epochs_decay). torch has no closed form of it (a SequentialLR of
    ConstantLR and LinearLR needs scheduler objects, which a config cannot name).

    `decay_start`: an integer is an iteration (0 <= decay_start < max_iters); a float strictly
    between 0 and 1 is a fraction of the run, the decay starting at iteration
    floor(decay_start x max_iters) (0.5: the original's n_epochs = n_epochs_decay), so a shortened
    or lengthened run (train.max_iters, also on resume) keeps its shape. Any other float is refused
    (1.0 or 300.0 would be ambiguous)."""

    def __init__(self, optimizer, decay_start: int | float, max_iters: int, warmup: str | None = None,
                 warmup_iters: int = 0, warmup_factor: float = 0.001, last_epoch: int = -1):
        self.decay_start = decay_start
        self.max_iters = max_iters
        self.first_decay_iter()  # checks the setting against this run's length
        super().__init__(optimizer, warmup, warmup_iters, warmup_factor, last_epoch)

    def first_decay_iter(self) -> int:
        """The iteration the decay starts at, for the current `max_iters`."""
        start = self.decay_start
        if isinstance(start, float):
            if not 0.0 < start < 1.0:
                raise ValueError(f"decay_start: a float is a fraction of the run, strictly between 0 and 1; got "
                                 f"{start!r} (an iteration is an integer: decay_start: {start:.0f})")
            return int(start * self.max_iters)
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < self.max_iters:
            raise ValueError(f"need 0 <= decay_start < max_iters, got decay_start {start!r} and max_iters "
                             f"{self.max_iters} (or a fraction of the run: decay_start: 0.5 decays over its second half)")
        return start

    def decay(self, it: int) -> float:
        start = self.first_decay_iter()
        if it < start:
            return 1.0
        return max(1.0 - (it - start) / (self.max_iters - start), 0.0)


def build_scheduler(node: Mapping, optimizer: torch.optim.Optimizer, max_iters: int, path: str) -> LRScheduler:
    if not isinstance(node, Mapping) or "type" not in node:
        raise ConfigError(f"{path}: expected a scheduler node like {{type: WarmupPolyLR}}, got {node!r}")
    node = dict(node)
    if "max_iters" in accepted_keywords(SCHEDULERS.get(node["type"], path))[0]:
        node.setdefault("max_iters", max_iters)
    return SCHEDULERS.build(node, path=path, optimizer=optimizer)

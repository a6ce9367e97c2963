"""`FrozenStartHook`: named parameter groups left unchanged for the first iterations.

    hooks: [{type: FrozenStartHook, iters: 200, groups: [encoder]}]   # names from optim.param_groups

A warm head start: the new decoder and head train first, so their random gradients do not
disturb a pretrained encoder. The groups' learning rate is 0 during those iterations (set
before each step, restored right after it, before the schedulers step, so any scheduler sees
its own learning rates and checkpoints hold them). Gradients still flow through the encoder
and `requires_grad` never changes, because DistributedDataParallel fixes the set of
parameters that get gradients when it wraps a network. With AdamW or SGD a learning rate of
0 changes no weight (weight decay included); momentum and Adam moments do accumulate, and
BatchNorm statistics still adapt unless `norm_eval` is set.
"""

from __future__ import annotations

from framework.engine.hooks.base import Hook
from framework.errors import ConfigError
from framework.registry import HOOKS


@HOOKS.register()
class FrozenStartHook(Hook):
    priority = 15  # after_iter: after the logger (10), before LRSchedulerHook (20)

    def __init__(self, iters: int, groups=("encoder",)):
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 0:
            raise ValueError(f"iters must be an integer >= 0, got {iters!r}")
        self.iters = iters
        self.group_names = [groups] if isinstance(groups, str) else list(groups)
        self.groups: list[dict] = []
        self._saved: list[float] = []

    def before_train(self, trainer) -> None:
        found = {g.get("name"): g for opt in trainer.optim.optimizers.values() for g in opt.param_groups}
        missing = [n for n in self.group_names if n not in found]
        if missing:
            named = ", ".join(str(n) for n in found if n) or "none"
            raise ConfigError(f"hooks: FrozenStartHook: no parameter group named {', '.join(missing)} "
                              f"(groups: {named}; name them in optim.param_groups)")
        self.groups = [found[n] for n in self.group_names]

    def before_iter(self, trainer) -> None:
        if trainer.iter < self.iters:
            self._saved = [g["lr"] for g in self.groups]
            for group in self.groups:
                group["lr"] = 0.0

    def after_iter(self, trainer) -> None:
        for group, lr in zip(self.groups, self._saved):
            group["lr"] = lr
        self._saved = []

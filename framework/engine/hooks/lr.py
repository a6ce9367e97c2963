"""LRSchedulerHook (priority 20): every scheduler steps once per iteration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework.engine.hooks.base import Hook
from framework.registry import HOOKS

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer


@HOOKS.register()
class LRSchedulerHook(Hook):
    priority = 20

    def after_iter(self, trainer: Trainer) -> None:
        trainer.optim.step_schedulers()

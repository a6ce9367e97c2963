"""The Hook base class (see framework/engine/hooks/__init__.py for the stages and built-ins)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer


class Hook:
    priority = 50

    def before_train(self, trainer: Trainer) -> None:
        pass

    def before_iter(self, trainer: Trainer) -> None:
        pass

    def after_iter(self, trainer: Trainer) -> None:
        pass

    def after_eval(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        pass

    def after_train(self, trainer: Trainer) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def monitored_metrics(self) -> dict[str, str]:
        """{config key: the evaluation value it names}, checked against the run's metrics at
        start-up (a typo refused before training, not at the first evaluation)."""
        return {}


def every(trainer: Trainer, interval: int) -> bool:
    """True every `interval` iterations and at the last one (interval 0: never)."""
    return due(trainer.iter, trainer.max_iters, interval)


def improves(value: float, best: float | None, mode: str) -> bool:
    """Whether `value` beats the best so far (none yet: it does) for best_mode max or min."""
    return best is None or (value > best if mode == "max" else value < best)


def due(iteration: int, max_iters: int, interval: int) -> bool:
    return bool(interval) and (iteration % interval == 0 or iteration == max_iters)

"""EarlyStoppingHook: end training when a validation metric stops improving.

    hooks: [{type: EarlyStoppingHook, monitor: mIoU, rule: greater, patience: 3, min_delta: 0.005}]

`rule` (greater: a greater value is better; less: a smaller one) may be left out where the
metric's name tells it (framework/config/metric_direction.py, which also decides
`train.best_mode: auto`): mIoU, accuracy, PSNR, SSIM, MS-SSIM greater; loss, FID, KID, SWD, L1
less. The log says which it chose; a name it does not know needs `rule`.

The rule, applied at every evaluation after the first iteration (an evaluation of the untrained
network, `val_at_start`, is no candidate):

- `check_finite` (default true) and the value is NaN or infinite: stop (with false, such a
  value counts as no improvement).
- `stopping_threshold` set and the value reaches it (>= for `rule: greater`, <= for `less`): stop.
- The value improves on the best so far by more than `min_delta` (greater: value > best +
  min_delta; less: value < best - min_delta; the first evaluation always improves): it becomes
  the best, the count of evaluations without improvement goes back to 0.
- Otherwise the count goes up; when it reaches `patience`, stop.

The metrics of an evaluation are summed over the ranks, so every rank applies the rule to the
same numbers; the decision is still agreed through one small collective, so no rank can leave
the loop alone. On a stop the trainer finishes that iteration's hooks (the CheckpointHook saves
the iteration), logs why, appends `{"iter", "epoch", "stopped_early": {...}}` to metrics.jsonl,
and tools/train.py exits with status 0. The best value, the count and the stop itself are hook
state in every checkpoint: a resumed run continues the count exactly, and resuming a run that
stopped early trains no further.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from framework.config.metric_direction import known_directions, metric_direction
from framework.dist import agree_any, is_main
from framework.engine.hooks.base import Hook
from framework.engine.hooks.evaluation import EvalHook
from framework.errors import ConfigError
from framework.metrics import summary_values
from framework.registry import HOOKS

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer

logger = logging.getLogger("framework")

RULES = ("greater", "less")


class StoppingRule:
    """The early-stopping decision on a sequence of values, apart from the trainer."""

    def __init__(self, rule: str, min_delta: float = 0.0, patience: int = 3,
                 stopping_threshold: float | None = None, check_finite: bool = True):
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
        if not (isinstance(min_delta, (int, float)) and min_delta >= 0):  # NaN fails too
            raise ValueError(f"min_delta must be a number >= 0, got {min_delta!r}")
        if stopping_threshold is not None and not (isinstance(stopping_threshold, (int, float))
                                                   and not isinstance(stopping_threshold, bool)):
            raise ValueError(f"stopping_threshold must be a number or null, got {stopping_threshold!r}")
        self.rule = rule
        self.min_delta = float(min_delta)
        self.patience = patience
        self.stopping_threshold = stopping_threshold
        self.check_finite = check_finite
        self.best: float | None = None
        self.wait = 0  # evaluations since the last improvement

    def _better(self, value: float, than: float, margin: float) -> bool:
        return value > than + margin if self.rule == "greater" else value < than - margin

    def update(self, value: float) -> str | None:
        """Take one evaluation's value; the reason to stop, or None to go on."""
        if not math.isfinite(value) and self.check_finite:
            return f"the monitored value is {value} (not finite); best so far {self.best}"
        threshold = self.stopping_threshold
        if threshold is not None and (value == threshold or self._better(value, threshold, 0.0)):
            return f"the monitored value {value:.6g} reached stopping_threshold {threshold:.6g}"
        if math.isfinite(value) and (self.best is None or self._better(value, self.best, self.min_delta)):
            self.best, self.wait = value, 0
            return None
        self.wait += 1
        if self.wait >= self.patience:
            return (f"no improvement by more than min_delta {self.min_delta:g} over the best {self.best:.6g} "
                    f"in the last {self.wait} evaluations (patience {self.patience})")
        return None


@HOOKS.register()
class EarlyStoppingHook(Hook):
    priority = 35  # after EvalHook (30), before CheckpointHook (40), which saves the stopped iteration

    def __init__(self, monitor: str, rule: str | None = None, patience: int = 3, min_delta: float = 0.0,
                 stopping_threshold: float | None = None, check_finite: bool = True):
        self.monitor = monitor
        if rule is None:
            rule = self._rule_from_name(monitor)
        self.decision = StoppingRule(rule, min_delta, patience, stopping_threshold, check_finite)
        self.stopped: dict = {}  # {iter, reason} once the run stopped early

    @staticmethod
    def _rule_from_name(monitor: str) -> str:
        rule = metric_direction(monitor) if isinstance(monitor, str) else None
        if rule is None:
            raise ValueError(f"rule: missing, and the name '{monitor}' does not say whether a greater or a smaller "
                             f"value is better: set rule: greater or rule: less (known names: {known_directions()})")
        logger.info(f"early stopping: rule {rule} for {monitor} (from the metric's name; set rule to choose another)")
        return rule

    def monitored_metrics(self) -> dict[str, str]:
        return {"monitor": self.monitor}

    def state_dict(self) -> dict:
        return {"best": self.decision.best, "wait": self.decision.wait, "stopped": dict(self.stopped)}

    def load_state_dict(self, state: dict) -> None:
        self.decision.best, self.decision.wait = state.get("best"), int(state.get("wait", 0))
        self.stopped = dict(state.get("stopped") or {})

    def before_train(self, trainer: Trainer) -> None:
        evaluations = [h for h in trainer.hooks if isinstance(h, EvalHook) and h.loader is not None and h.interval]
        if not evaluations:
            raise ConfigError("hooks: EarlyStoppingHook needs evaluations during training: set data.val and "
                              "train.val_interval > 0")
        if self.stopped:  # resuming a run that stopped early: nothing left to train
            logger.info(f"early stopping: this run stopped at iteration {self.stopped['iter']} "
                        f"({self.stopped['reason']}); not training further")
            trainer.request_stop(self.stopped["reason"])

    def after_eval(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        if trainer.iter == 0:  # the untrained network (val_at_start) is no candidate
            return
        if self.monitor not in metrics:
            have = ", ".join(summary_values(metrics))
            raise ConfigError(f"hooks: EarlyStoppingHook: monitor '{self.monitor}' is not a metric of this run "
                              f"(have: {have})")
        value = metrics[self.monitor]
        reason = self.decision.update(value)
        if not agree_any(reason is not None) or trainer.iter >= trainer.max_iters:
            return
        reason = f"{self.monitor}: {reason}" if reason else f"{self.monitor}: another rank decided to stop"
        self.stopped = {"iter": trainer.iter, "reason": reason}
        trainer.request_stop(reason)
        if is_main():
            logger.info(f"early stopping at iteration {trainer.iter}/{trainer.max_iters}: {reason}")
            record = {"iter": trainer.iter, "epoch": trainer.epoch,
                      "stopped_early": {"monitor": self.monitor, "value": value if math.isfinite(value) else str(value),
                                        "best": self.decision.best, "reason": reason}}
            with open(Path(trainer.work_dir) / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

"""HParamsHook (priority 45): the run's key settings and its metrics for every logger (TensorBoard's
HPARAMS tab, MLflow parameters, csv/hparams.json), so runs compare side by side.

Settings: the scalar values of `task` (types, sizes, loss weights), of the optimizer entries
(type, lr, ...), the training batch size, iterations, accumulation, seed, AMP, processes.
Metrics: every summary metric (`val/<name>`, its latest value) and, with `train.best_metric`,
its best value so far (`best/<name>`). Written at the first evaluation (when the metric names
are known) or at the end of a run that never evaluated (unless it failed).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import yaml

from framework.dist import get_world_size
from framework.engine.hooks.base import Hook, improves
from framework.metrics import summary_values
from framework.registry import HOOKS

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer


def flat_scalars(node, prefix: str = "") -> dict:
    """{'a.b.c': value} for the int/float/str/bool leaves of a nested config (lists as text)."""
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flat_scalars(value, f"{prefix}{key}.").items()}
    if isinstance(node, list):
        return {prefix[:-1]: str(node)} if all(not isinstance(v, (dict, list)) for v in node) else {}
    if node is None:
        return {prefix[:-1]: "null"}
    return {prefix[:-1]: node}


def key_settings(config: dict, world_size: int) -> dict:
    settings = flat_scalars({"task": config.get("task") or {}})
    for section in ("optim", "optimizers"):
        settings.update(flat_scalars({section: config.get(section) or {}}))
    train = config.get("train") or {}
    settings.update({
        "batch_size": (config.get("data") or {}).get("train", {}).get("batch_size", "null"),
        "processes": world_size,
        "max_iters": train.get("max_iters") or "null",
        "accumulate": train.get("accumulate", 1),
        "seed": config.get("seed", 0),
        "amp": amp_setting(config.get("amp") or {}),
    })
    return settings


def amp_setting(amp: dict) -> str:
    """off, auto (the hardware picks: runtime/precision.py) or the dtype of `enabled: true` (float16 when unset)."""
    if amp.get("enabled") == "auto":
        return "auto"
    return (amp.get("dtype") or "float16") if amp.get("enabled") else "off"


@HOOKS.register()
class HParamsHook(Hook):
    priority = 45

    def __init__(self, best_metric: str | None = None, best_mode: str = "max"):
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.best: float | None = None
        self._written = False

    def state_dict(self) -> dict:
        return {"best": self.best, "written": self._written}

    def load_state_dict(self, state: dict) -> None:
        # A resumed run keeps the summary written before (events at step 0 are never purged).
        self.best, self._written = state.get("best"), bool(state.get("written"))

    def after_eval(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        if not trainer.loggers:
            return
        value = metrics.get(self.best_metric) if self.best_metric else None
        counts = value is not None and not math.isnan(value) and trainer.iter > 0
        if counts and improves(value, self.best, self.best_mode):
            self.best = value
        if not self._written:
            self._write(trainer, summary_values(metrics))
        if counts:
            trainer.loggers.log_scalars({f"best/{self.best_metric}": self.best}, trainer.iter)

    def after_train(self, trainer: Trainer) -> None:
        # Not after an error: a full disk, say, would fail again in a logger's writer thread.
        if trainer.loggers and not self._written and trainer.error is None:
            self._write(trainer, {})

    def _write(self, trainer: Trainer, summary: dict[str, float]) -> None:
        config = yaml.safe_load(trainer.config_text) if trainer.config_text else {}
        metric_tags = {f"val/{name}": value for name, value in summary.items()}
        if self.best_metric:
            metric_tags[f"best/{self.best_metric}"] = self.best  # None before a trained network was evaluated
        trainer.loggers.log_hparams(key_settings(config or {}, get_world_size()), metric_tags)
        self._written = True

"""Metric: accumulates summable tensor states on the device, turns them into floats at the end.

Every state is a SUM over batches, so under DDP each rank accumulates its own share and one
`all_reduce(SUM)` per state (`sync`) gives the totals over the whole dataset; no predictions
are gathered. Call `sync` once per evaluation, after the last `update` and before `compute`,
on every rank (a second sync would add the totals again).

    metric.reset()
    for batch in loader:
        metric.update(task.val_step(batch))
    metric.sync(all_reduce_sum_)                 # framework.dist: a no-op in one process
    values = metric.compute()                    # {"mIoU": 0.71, ...}
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from framework.errors import ConfigError


class Metric(ABC):
    def __init__(self) -> None:
        self._defaults: dict[str, torch.Tensor] = {}

    def add_state(self, name: str, default: torch.Tensor) -> None:
        """Declare a summable state; it starts as (and `reset` restores) a copy of `default`."""
        self._defaults[name] = default.detach().clone()
        setattr(self, name, default.detach().clone())

    def states(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self._defaults}

    def reset(self) -> None:
        for name, default in self._defaults.items():
            setattr(self, name, default.to(getattr(self, name).device, copy=True))

    def to(self, device: torch.device | str) -> Metric:
        for name, state in self.states().items():
            setattr(self, name, state.to(device))
        return self

    def sync(self, all_reduce: Callable[[torch.Tensor], Any]) -> None:
        """Sum every state over the ranks in place; `all_reduce` is e.g. `framework.dist.all_reduce_sum_`."""
        for state in self.states().values():
            all_reduce(state)

    def check_image_size(self, height: int, width: int) -> None:  # noqa: B027 (optional)
        """Raise ValueError when images of this size cannot be evaluated (a window or pyramid
        larger than them). Called at each evaluation and, with the evaluation data's first
        sample, at start-up."""

    def use_dataset(self, dataset, path: str, dataset_path: str) -> None:  # noqa: B027 (optional)
        """Adopt what the evaluation dataset says about its labels (class names); `path` is the
        metric's config path and `dataset_path` the dataset's, for error messages."""

    @abstractmethod
    def update(self, outputs: dict[str, Any]) -> None:
        """Add one batch; `outputs` is what the task's val_step returned. No host syncs here."""

    @abstractmethod
    def compute(self) -> dict[str, float]:
        """The metric values as python floats (the only place they reach the host)."""

    def result_names(self) -> list[str] | None:
        """The keys `compute` will return, known before any evaluation (so that a name such as
        train.best_metric is checked at start-up); None when a metric cannot say."""
        return None

    def images(self) -> dict[str, torch.Tensor]:
        """Pictures of the accumulated state ({name: 3 x H x W float in [0, 1]}), e.g. a
        confusion matrix; read after `sync`, like `compute`. None by default."""
        return {}


# Metric names: "mIoU" is a summary value, "IoU.cat" a per-class one (metric.class).
def is_per_class(key: str) -> bool:
    return "." in key


def summary_values(metrics: dict[str, float]) -> dict[str, float]:
    """The summary values of a result, without the per-class ones."""
    return {k: v for k, v in metrics.items() if not is_per_class(k)}


def json_safe(metrics: dict[str, float]) -> dict[str, float | None]:
    """NaN (a class absent from the data) as None, which JSON can hold."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}

def fit_metrics_to_dataset(metrics: list, dataset, dataset_path: str) -> None:
    """Let every metric adopt the evaluation dataset's label names, before anything is evaluated."""
    for i, metric in enumerate(metrics):
        if hasattr(metric, "use_dataset"):
            metric.use_dataset(dataset, f"metrics[{i}]", dataset_path)


def check_metrics_fit_images(metrics: list, dataset, dataset_path: str) -> None:
    """Refuse at start-up a metric that cannot evaluate images of the evaluation data's size (its
    first sample's, after the pipeline), instead of at the first evaluation after an interval of
    training. Reads that sample only when a metric has a size limit."""
    limited = [(i, m) for i, m in enumerate(metrics)
               if isinstance(m, Metric) and type(m).check_image_size is not Metric.check_image_size]
    if not limited or len(dataset) == 0:
        return
    sample = dataset[0]
    if not isinstance(sample, dict):  # a custom dataset's own sample format: checked at evaluation
        return
    sizes = sorted({tuple(v.shape[-2:]) for v in sample.values() if isinstance(v, torch.Tensor) and v.ndim == 3})
    for i, metric in limited:
        for height, width in sizes:
            try:
                metric.check_image_size(height, width)
            except ValueError as err:
                raise ConfigError(f"metrics[{i}]: {err} ({dataset_path}[0] is {height}x{width} after its "
                                  "pipeline)") from err


def known_result_names(metrics: list[Metric]) -> list[str] | None:
    """Every key an evaluation with `metrics` returns; None when one of them cannot say."""
    names: list[str] = []
    for metric in metrics:
        found = metric.result_names()
        if found is None:
            return None
        names += found
    return names

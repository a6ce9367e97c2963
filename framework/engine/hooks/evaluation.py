"""EvalHook (priority 30): evaluation during training, its reports, and after_eval for every hook."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from framework.checkpoint import files as ckpt
from framework.dist import is_main
from framework.engine.evaluation import evaluate
from framework.engine.hooks.base import Hook, every
from framework.engine.nonfinite import refuse_nonfinite_weights
from framework.errors import EvaluationError
from framework.metrics import is_per_class, json_safe, summary_values
from framework.registry import HOOKS
from framework.runtime.cli import user_error_line

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer

logger = logging.getLogger("framework")


@HOOKS.register()
class EvalHook(Hook):
    """Evaluates the task on `loader` with `metrics`; reports to the console, metrics.jsonl and
    the loggers (`val/<metric>`, `val_per_class/<metric.class>`, metric images such as
    `val/confusion_matrix`, and the task's visualisation of the first validation batch: the same
    samples at every evaluation, as the loader's order is fixed); then passes the metrics to
    every hook's after_eval."""

    priority = 30

    def __init__(self, loader=None, metrics: list | None = None, interval: int = 1000,
                 at_start: bool = False, num_images: int = 4):
        self.loader = loader
        self.metrics = metrics or []
        self.interval = interval
        self.at_start = at_start
        self.num_images = num_images

    def before_train(self, trainer: Trainer) -> None:
        if trainer.iter and is_main():
            self._forget_after(trainer.iter, Path(trainer.work_dir) / "metrics.jsonl")
        if self.at_start and trainer.iter == 0 and self.loader is not None:
            self._run(trainer)

    @staticmethod
    def _forget_after(iteration: int, path: Path) -> None:
        """Drop records past `iteration`: a run resumed from there evaluates them again."""
        if not path.is_file():
            return
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if json.loads(line)["iter"] <= iteration]
        if len(kept) < len(lines):
            ckpt.atomic_write_bytes(path, lambda f: f.write("".join(kept).encode()))

    def after_iter(self, trainer: Trainer) -> None:
        if self.loader is not None and every(trainer, self.interval):
            self._run(trainer)

    def _run(self, trainer: Trainer) -> None:
        trainer.ensure_finite()  # no metric record from diverged weights
        refuse_nonfinite_weights(trainer.task.state_dict(), f"evaluation at iteration {trainer.iter}")

        def write_images(i: int, batch: dict, outputs: dict) -> None:
            if i == 0 and self.num_images and trainer.loggers.takes_images:
                for tag, image in trainer.task.visualize(batch, outputs, self.num_images).items():
                    trainer.loggers.log_image(f"val/{tag}", image, trainer.iter)

        try:
            metrics = evaluate(trainer.task, self.loader, self.metrics, trainer.device, on_batch=write_images)
        except Exception as err:  # the iteration is complete: say so, so its training is not lost
            raise EvaluationError(f"evaluation at iteration {trainer.iter} failed: {user_error_line(err)}") from err
        if is_main():
            self._report(trainer, metrics)
        trainer.call_hooks("after_eval", metrics)

    def _report(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        line = "  ".join(f"{k} {v:.4f}" for k, v in summary_values(metrics).items()) or "no metrics configured"
        logger.info(f"val iter {trainer.iter}: {line}")
        if trainer.loggers:
            # per-class values in a group of their own
            trainer.loggers.log_scalars({f"{'val_per_class' if is_per_class(key) else 'val'}/{key}": value
                                         for key, value in metrics.items() if not math.isnan(value)}, trainer.iter)
            if trainer.loggers.takes_images:
                for metric in self.metrics:
                    for tag, image in metric.images().items():
                        trainer.loggers.log_image(f"val/{tag}", image, trainer.iter)
            trainer.loggers.flush()
        record = {"iter": trainer.iter, "epoch": trainer.epoch, **json_safe(metrics)}
        with open(Path(trainer.work_dir) / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

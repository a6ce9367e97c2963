"""CheckpointHook (priority 40): iteration checkpoints, `latest`, best.pth and the best-metric record."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from framework.checkpoint import files as ckpt
from framework.checkpoint.run_folder import best_path, checkpoint_folder, iteration_name
from framework.dist import get_world_size, is_main
from framework.engine.hooks.base import Hook, every, improves
from framework.engine.nonfinite import refuse_nonfinite_weights
from framework.errors import EvaluationError
from framework.metrics import summary_values
from framework.registry import HOOKS

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer

logger = logging.getLogger("framework")


@HOOKS.register()
class CheckpointHook(Hook):
    """Saves iter_<N>.pth (keeping the last `keep_last`), `latest`, and best.pth, and keeps the
    best-metric record {metric, value, iter} (checkpointed through its state_dict)."""

    priority = 40

    def __init__(self, interval: int = 1000, keep_last: int = 3, best_metric: str | None = None,
                 best_mode: str = "max"):
        self.interval = interval
        self.keep_last = keep_last
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.best: dict = {}
        self._improved_at = -1  # the iteration whose evaluation set a new best, until saved
        self._saved_iter = -1

    def state_dict(self) -> dict:
        return {"best": dict(self.best)} if self.best else {}

    def load_state_dict(self, state: dict) -> None:
        self.best = dict(state.get("best") or {})

    def before_train(self, trainer: Trainer) -> None:
        if is_main():
            for path in ckpt.remove_stale_temp_files(checkpoint_folder(trainer.work_dir)):
                logger.info(f"removed {path.name}, left by a checkpoint write that was interrupted")

    def after_eval(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        if not self.best_metric or trainer.iter == 0:  # an untrained network (val_at_start) is no candidate
            return
        if self.best_metric not in metrics:
            have = ", ".join(summary_values(metrics))
            raise EvaluationError(f"train.best_metric: '{self.best_metric}' is not a metric of this run (have: {have})")
        value, best = metrics[self.best_metric], self.best.get("value")
        better = improves(value, best, self.best_mode)
        if better and not math.isnan(value):
            self.best = {"metric": self.best_metric, "value": value, "iter": trainer.iter}
            self._improved_at = trainer.iter

    def after_iter(self, trainer: Trainer) -> None:
        stopping = trainer.stop_signal is not None or trainer.stop_reason is not None
        save_iter = every(trainer, self.interval) or stopping
        save_best = self._improved_at == trainer.iter
        if not (save_iter or save_best):
            return
        trainer.ensure_finite()  # never a checkpoint of diverged weights
        state = trainer.state_dict()  # on every rank: it gathers each rank's random state
        refuse_nonfinite_weights(state["task"], f"checkpoint at iteration {trainer.iter}")
        if not is_main():
            return
        if trainer.loggers:  # every row up to this iteration on disk before the checkpoint a resume keeps them by
            trainer.loggers.flush()
        if save_iter:
            path = self._save_iteration(trainer, state)
            if trainer.stop_signal is not None:
                logger.info(f"stopped by {trainer.stop_signal.name} at iteration {trainer.iter}: saved "
                            f"{path}; continue with --resume")
        if save_best:
            ckpt.save_checkpoint(state, best_path(trainer.work_dir))
            logger.info(f"new best {self.best_metric} {self.best['value']:.4f} at iter {trainer.iter}")

    def _save_iteration(self, trainer: Trainer, state: dict) -> Path:
        folder = checkpoint_folder(trainer.work_dir)
        name = iteration_name(trainer.iter)
        ckpt.save_checkpoint(state, folder / name)
        ckpt.write_latest(folder, name)  # only after the file is complete
        ckpt.prune(folder, self.keep_last, current_iter=trainer.iter)
        self._saved_iter = trainer.iter
        return folder / name

    def after_train(self, trainer: Trainer) -> None:
        """When evaluation failed after a completed iteration, keep that iteration's training:
        save its checkpoint (one process only: under DDP the other ranks may be waiting in a
        collective of the failed evaluation, so nothing that needs them can run). Not before the
        first iteration (`val_at_start`): nothing is trained yet, and an untrained start would only
        stand in the way of the corrected run (framework/checkpoint/run_folder.py)."""
        if not isinstance(trainer.error, EvaluationError) or get_world_size() > 1:
            return
        if self._saved_iter == trainer.iter or trainer.iter == 0:
            return
        state = trainer.state_dict()
        refuse_nonfinite_weights(state["task"], f"checkpoint at iteration {trainer.iter}")
        path = self._save_iteration(trainer, state)
        logger.info(f"saved {path} before stopping on the evaluation error; fix it and continue with --resume")

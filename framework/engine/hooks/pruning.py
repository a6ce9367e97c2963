"""OptunaPruningHook: report each evaluation to an Optuna trial and stop the run when Optuna prunes it.

    hooks: [{type: OptunaPruningHook, storage: D/study.journal, study: search, trial_id: 3, monitor: mIoU}]

tools/search.py adds it to every trial's run (with `pruner` and `startup_trials`, the pruner the
search chose); it is not meant to be written by hand. After each evaluation (after iteration 0),
rank 0 alone opens the study in its JournalStorage file, reports the monitored value at this
iteration (`trial.report`) and asks `trial.should_prune()`; the decision goes to every rank
through one small collective (`agree_any`), so all ranks leave the loop together (under DDP no
rank waits for a peer that stopped). A pruned run ends like an early-stopped one: the
CheckpointHook saves the iteration, metrics.jsonl gets `{"iter", "epoch", "pruned": {...}}`, the
log says so, and tools/train.py exits 0; tools/search.py then marks the trial pruned. The stop is
hook state in the checkpoint: resuming a pruned run trains no further.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from framework.dist import agree_any, is_main
from framework.engine.hooks.base import Hook
from framework.errors import ConfigError
from framework.registry import HOOKS

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer

logger = logging.getLogger("framework")

PRUNERS = ("median", "none")


def make_pruner(name: str, startup_trials: int):
    """The pruner tools/search.py and every trial's hook share (a pruner lives in each process)."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


@HOOKS.register()
class OptunaPruningHook(Hook):
    priority = 35  # after EvalHook (30), before CheckpointHook (40), which saves the pruned iteration

    def __init__(self, storage: str, trial_id: int, monitor: str, study: str = "search", pruner: str = "median",
                 startup_trials: int = 2):
        if pruner not in PRUNERS:
            raise ConfigError(f"hooks: OptunaPruningHook: pruner '{pruner}' (have: {', '.join(PRUNERS)})")
        self.storage, self.study_name, self.trial_id, self.monitor = storage, study, int(trial_id), monitor
        self.pruner, self.startup_trials = pruner, int(startup_trials)
        self.pruned: dict = {}  # {iter, value} once pruned
        self._trial = None

    def state_dict(self) -> dict:
        return {"pruned": dict(self.pruned)}

    def load_state_dict(self, state: dict) -> None:
        self.pruned = dict(state.get("pruned") or {})

    def before_train(self, trainer: Trainer) -> None:
        if self.pruned:  # resuming a pruned run: nothing left to train
            trainer.request_stop(f"pruned by Optuna at iteration {self.pruned['iter']}")

    def _open_trial(self):
        if self._trial is None:
            import optuna
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            storage = JournalStorage(JournalFileBackend(self.storage))
            study = optuna.load_study(study_name=self.study_name, storage=storage,
                                      pruner=make_pruner(self.pruner, self.startup_trials))
            self._trial = optuna.trial.Trial(study, self.trial_id)
        return self._trial

    def after_eval(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        if trainer.iter == 0:
            return
        if self.monitor not in metrics:
            raise ConfigError(f"hooks: OptunaPruningHook: monitor '{self.monitor}' is not a metric of this run")
        value = metrics[self.monitor]
        prune = False
        if is_main():  # rank 0 alone talks to the study and decides
            trial = self._open_trial()
            if math.isfinite(value):
                trial.report(value, trainer.iter)
            prune = trial.should_prune()
        if not agree_any(prune) or trainer.iter >= trainer.max_iters:
            return
        self.pruned = {"iter": trainer.iter, "value": value if math.isfinite(value) else str(value)}
        reason = f"pruned by Optuna at iteration {trainer.iter} ({self.monitor} {value:.4g})"
        trainer.request_stop(reason)
        if is_main():
            logger.info(f"{reason}: saving the checkpoint and ending the run")
            record = {"iter": trainer.iter, "epoch": trainer.epoch, "pruned": {"monitor": self.monitor, **self.pruned}}
            with open(Path(trainer.work_dir) / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

"""Hooks: everything the training loop does besides the step itself.

A hook overrides any of `before_train`, `before_iter`, `after_iter`, `after_eval`,
`after_train`; each receives the Trainer (`after_eval` also the metrics of an evaluation,
the one place evaluation results are shared). Hooks run in ascending `priority` (built-ins
below; user hooks from the config's `hooks:` list default to 50, after every built-in):

    10 LoggerHook        losses/lr/timings to console, progress bar, the loggers
    15 FrozenStartHook   (when a config lists it) named parameter groups at lr 0 for K iterations
    20 LRSchedulerHook   every scheduler steps once per iteration
    30 EvalHook          evaluation every train.val_interval and at the end; metrics.jsonl,
                         the loggers' scalars and images; then after_eval for every hook
    35 EarlyStoppingHook (when a config lists it) stops when a validation metric stops improving
    35 OptunaPruningHook (tools/search.py adds it) reports each evaluation to a trial, stops a pruned run
    40 CheckpointHook    iter_<N>.pth every train.ckpt_interval, at the end and when a signal
                         (SIGTERM/SIGINT/SIGUSR1) or a hook stops the run; best.pth (the best-metric record)
    45 HParamsHook       the run's key settings and metrics for every logger (TensorBoard's HPARAMS tab)

A hook that keeps state across a resume returns it from `state_dict()` (tensors and plain
containers) and takes it back in `load_state_dict()`; the Trainer checkpoints it.
`after_train` runs also when training raised (`trainer.error` is set): keep it light there.
`trainer.iter` counts completed iterations, so in after_iter the first call sees iter == 1.

Owns: the `Hook` base (`base.py`) and the built-in hooks above, one per module.
May import: errors, registry, config (a metric's direction), dist, metrics, checkpoint (the run folder: CheckpointHook),
runtime; within the engine, the trainer's types, evaluation and the non-finite guard.
"""

from framework.engine.hooks.base import Hook, every
from framework.engine.hooks.checkpoint import CheckpointHook
from framework.engine.hooks.early_stopping import EarlyStoppingHook
from framework.engine.hooks.evaluation import EvalHook
from framework.engine.hooks.frozen_start import FrozenStartHook
from framework.engine.hooks.hparams import HParamsHook
from framework.engine.hooks.logger import LoggerHook
from framework.engine.hooks.lr import LRSchedulerHook
from framework.engine.hooks.pruning import OptunaPruningHook

__all__ = ["Hook", "every", "LoggerHook", "LRSchedulerHook", "EvalHook", "CheckpointHook", "HParamsHook",
           "FrozenStartHook", "EarlyStoppingHook", "OptunaPruningHook"]

"""The training loop. It knows nothing of segmentation or GANs: it calls the task.

    trainer.fit():
        hook.before_train()                       for every hook, in priority order
        while iter < max_iters:
            hook.before_iter()
            batches = train.accumulate batches, moved to the device
            with autocast (amp.enabled):
                step_logs = task.train_iteration(batches, optim)   # the task calls optim.update(loss, name)
            optim.end_iteration()                 # one GradScaler update per iteration
            iter += 1
            hook.after_iter()                     Logger -> LRScheduler -> Eval -> Checkpoint -> user
                (EvalHook, after evaluating: hook.after_eval(metrics) for every hook)
        hook.after_train()                        always, also when the loop raised (`trainer.error`)

One iteration is one optimizer step (of every optimizer the task uses); `max_iters`, the LR
schedules and all intervals count iterations, whatever `accumulate` is. `trainer.iter` counts
completed iterations: in after_iter the first call sees iter == 1.

What hooks may read: `iter`, `max_iters`, `epoch`, `step_logs` (the iteration's detached loss
terms, on the device), `data_time`, `iter_time`, `stop_signal`, `error`, `task`, `optim`,
`loggers` (the config's loggers: `log_scalars`, `log_image`, ...; empty on ranks other than 0),
`writer` (TensorBoard's SummaryWriter on rank 0 when it is a logger, else None), `work_dir`, `device`, `stop_reason` (set by
`request_stop(reason)`, e.g. by the EarlyStoppingHook: the loop ends after that iteration's
hooks; the CheckpointHook saves it). Evaluation results reach hooks only through `after_eval(trainer, metrics)`. A hook keeps its own state and checkpoints it
through `state_dict()` / `load_state_dict()` (see framework/engine/hooks/__init__.py).

SIGTERM, SIGINT or SIGUSR1 during an iteration ends the run after that iteration: its after_iter
hooks run with `trainer.stop_signal` set (the CheckpointHook then saves whatever the interval), then
after_train, and `fit` returns; tools/train.py exits with 128 + the signal number. A signal
that arrives during the hooks is noticed after the next step. Under torchrun the ranks agree
on stopping at the same iteration (a signal seen by any rank stops all).
"""

from __future__ import annotations

import logging
import signal
import time
from typing import TYPE_CHECKING

import torch
from torch import nn

import framework
from framework.dist import agree_on_stop, gather_by_rank, get_rank, get_world_size
from framework.engine.evaluation import move_to_device
from framework.engine.hooks.base import Hook
from framework.engine.loggers import LoggerGroup, TensorBoardLogger
from framework.engine.nonfinite import NonFiniteGuard
from framework.engine.random_state import rng_state, set_rng_state
from framework.engine.resume import log_ranks_without_state
from framework.engine.stop import STOP_SIGNALS, StopSignals

if TYPE_CHECKING:
    from framework.optim.optimizers import Optimizers

logger = logging.getLogger("framework")

# The checkpoint layout this version writes. 1 (framework 0.1): the best-metric record in
# meta["best"], no hook states; still resumable.
CHECKPOINT_FORMAT = 2


class TrainData:
    """An endless iterator of training batches that counts epochs and the position in the epoch.

    The position is the epoch's samples consumed by every rank together, so a checkpoint's
    position means the same at any number of processes. A new epoch re-seeds the sampler's order
    (`set_epoch`); resuming mid-epoch makes the sampler skip the samples already seen, so
    nothing is loaded to be thrown away.
    """

    def __init__(self, loader):
        self.loader = loader
        self.epoch = 0
        self.samples_in_epoch = 0  # samples of the current epoch consumed by all ranks together
        self._iterator = None

    @property
    def samples_per_batch(self) -> int:
        """One batch on every rank."""
        return self.loader.batch_size * getattr(self.loader.sampler, "world_size", 1)

    @property
    def batches_in_epoch(self) -> int:
        """This rank's batches of the current epoch (at this number of processes)."""
        return self.samples_in_epoch // self.samples_per_batch

    def seek(self, epoch: int, samples_in_epoch: int) -> None:
        self.epoch, self.samples_in_epoch = epoch, samples_in_epoch
        self._iterator = None

    def __iter__(self) -> TrainData:
        return self

    def __next__(self):
        while True:
            if self._iterator is None:
                self.loader.sampler.set_epoch(self.epoch)
                self.loader.sampler.set_start(self.samples_in_epoch)
                self._iterator = iter(self.loader)
            try:
                batch = next(self._iterator)
            except StopIteration:
                self.epoch += 1
                self.samples_in_epoch = 0
                self._iterator = None
                continue
            self.samples_in_epoch += self.samples_per_batch
            return batch


class Trainer:
    def __init__(self, task: nn.Module, optim: Optimizers, train_loader, hooks: list[Hook], max_iters: int,
                 work_dir: str, device: torch.device, *, loggers: LoggerGroup | None = None, accumulate: int = 1,
                 amp_dtype: torch.dtype | None = None, nan_guard: NonFiniteGuard | None = None,
                 config_text: str = "", overrides: list[str] | tuple[str, ...] = (),
                 stop_signals: tuple[signal.Signals, ...] = STOP_SIGNALS):
        self.task = task
        self.optim = optim
        self.data = TrainData(train_loader)
        self.hooks = sorted(hooks, key=lambda h: h.priority)
        self.max_iters = max_iters
        self.work_dir = work_dir
        self.device = device
        self.loggers = loggers or LoggerGroup()  # the config's loggers on rank 0; empty elsewhere
        self.accumulate = accumulate
        self.amp_dtype = amp_dtype  # None: full precision
        self.nan_guard = nan_guard or NonFiniteGuard()
        self.config_text = config_text  # the resolved config, saved in every checkpoint
        self.overrides = list(overrides)  # the command line's key=value overrides, likewise
        self.stop_signals = stop_signals  # those that end the run with a checkpoint (dist.requeue_signal)

        self.iter = 0  # completed iterations
        self.step_logs: dict = {}
        self.data_time = 0.0
        self.iter_time = 0.0
        self.stop_signal: signal.Signals | None = None  # set when SIGTERM/SIGINT/SIGUSR1 ends the run early
        self.stop_reason: str | None = None  # set by a hook's request_stop (early stopping)
        self.error: BaseException | None = None  # what ended fit() with an exception, for after_train
        self._stage_methods: dict[str, list] = {}  # call_hooks: stage -> the hooks' bound methods

    @property
    def epoch(self) -> int:
        return self.data.epoch

    @property
    def writer(self):
        """TensorBoard's SummaryWriter when `tensorboard` is among the loggers (on rank 0), else None."""
        tensorboard = self.loggers.of_type(TensorBoardLogger)
        return tensorboard.writer if tensorboard is not None else None

    def call_hooks(self, stage: str, *args) -> None:
        methods = self._stage_methods.get(stage)
        if methods is None:  # looked up once per stage (and again at each fit): this runs twice a step
            methods = self._stage_methods[stage] = [
                method for hook in self.hooks
                if getattr(method := getattr(hook, stage), "__func__", None) is not getattr(Hook, stage)
            ]  # the hooks that override the stage: the base's no-ops are skipped
        for method in methods:
            method(self, *args)

    def request_stop(self, reason: str) -> None:
        """End training after the current iteration's hooks (every rank must ask alike: a hook
        decides on values all ranks share, e.g. evaluation metrics, and agrees through a collective)."""
        self.stop_reason = reason

    def fit(self) -> None:
        """Train to max_iters, or until SIGTERM/SIGINT/SIGUSR1 (then `self.stop_signal` names it)."""
        self.task.train()
        self._stage_methods = {}  # hooks added or removed since the last fit are seen
        with StopSignals(self.stop_signals) as stop:
            try:
                self.call_hooks("before_train")
                while self.iter < self.max_iters and self.stop_signal is None and self.stop_reason is None:
                    self.call_hooks("before_iter")
                    start = time.perf_counter()
                    self.step_logs = self._train_iteration()
                    self.iter += 1
                    self.iter_time = time.perf_counter() - start
                    # read once per iteration (and agreed across ranks), so every hook and rank agrees
                    self.stop_signal = agree_on_stop(stop.received)
                    self.call_hooks("after_iter")
                self.ensure_finite()  # a run never ends "successfully" with diverged weights
            except BaseException as err:
                self.error = err
                raise
            finally:
                try:
                    self.call_hooks("after_train")  # flush writers, clear the progress bar, even on failure
                finally:
                    self._close_loggers()

    def _close_loggers(self) -> None:
        """Close every logger; after an error, a logger that fails to close (e.g. on the same full
        disk) is a warning, never a second error that would hide the first."""
        try:
            self.loggers.close("failed" if self.error else "stopped" if self.stop_signal else "finished")
        except Exception as err:
            if self.error is None:
                raise
            logger.warning(f"warning: a logger failed to close after the error: {err}")

    def _train_iteration(self) -> dict:
        """One optimizer step over `accumulate` micro-batches; returns the averaged step logs."""
        fetch_start = time.perf_counter()
        batches = [next(self.data) for _ in range(self.accumulate)]
        if self.device.type != "cpu":  # a loader's batches are on the CPU already: nothing to move there
            batches = [move_to_device(batch, self.device) for batch in batches]
        self.data_time = time.perf_counter() - fetch_start
        if self.amp_dtype is None:
            logs = self.task.train_iteration(batches, self.optim)
        else:
            with torch.autocast(self.device.type, dtype=self.amp_dtype):
                logs = self.task.train_iteration(batches, self.optim)
        if self.optim.end_iteration():
            logs = {}  # a skipped (non-finite) step: its values would only turn the averages into NaN
        self.nan_guard.observe(self.iter + 1, logs)
        norms = self.optim.take_grad_norms()
        if norms:
            several = len(self.optim.names) > 1
            logs.update({f"grad_norm_{name}" if several else "grad_norm": norm for name, norm in norms.items()})
        return logs

    def ensure_finite(self) -> None:
        """Raise NonFiniteError when a loss was not finite since the last check (on every rank
        at once: a collective). Hooks call it before anything is logged, evaluated or saved."""
        self.nan_guard.check(self.iter)

    # ------------------------------------------------------------------ checkpoint state

    def state_dict(self) -> dict:
        """Everything an exact resume needs, as tensors and plain containers (weights_only-loadable):

        meta   counters (iteration, epoch, batches consumed in the epoch), the checkpoint format,
               the resolved config and command-line overrides, framework and torch versions, thread count
        task   every network (and EMA copy) of the task
        optim  every optimizer and scheduler (see Optimizers.state_dict)
        hooks  {hook key: its state_dict()} for hooks that keep state (e.g. the best metric)
        rng    {rank: python, numpy, torch CPU and CUDA generator states}
        task_by_rank  {rank: the task's rank_state_dict()}, for tasks that keep per-rank state

        Under DDP every rank must call this (the random states are gathered); rank 0 saves.
        """
        state = {
            "meta": {
                "format": CHECKPOINT_FORMAT,
                "iter": self.iter,
                "epoch": self.data.epoch,
                "batches_in_epoch": self.data.batches_in_epoch,
                # the run's shape (format 2 files without them: the resuming world size; see resume.py)
                "samples_in_epoch": self.data.samples_in_epoch,
                "world_size": get_world_size(),
                "batch_size": self.data.loader.batch_size,
                "accumulate": self.accumulate,
                "global_batch": get_world_size() * self.data.loader.batch_size * self.accumulate,
                "framework_version": framework.__version__, "torch_version": str(torch.__version__),
                "threads": torch.get_num_threads(),  # a deterministic run resumes at this count (engine/build.py)
                "config": self.config_text,
                "overrides": list(self.overrides),
            },
            "task": self.task.state_dict(),
            "optim": self.optim.state_dict(),
            "hooks": {key: state for key, hook in self._keyed_hooks() if (state := hook.state_dict())},
            "rng": gather_by_rank(rng_state()),
        }
        rank_state = self.task.rank_state_dict()
        if rank_state:  # the same task on every rank: all gather, or none
            state["task_by_rank"] = gather_by_rank(rank_state)
        return state

    def load_state_dict(self, state: dict) -> None:
        meta = state["meta"]
        self.task.load_state_dict(state["task"])
        self.optim.load_state_dict(state["optim"])
        self.iter = meta["iter"]
        self.data.seek(meta["epoch"], meta.get("samples_in_epoch",  # older files: batches at this world size
                                               meta["batches_in_epoch"] * self.data.samples_per_batch))
        hook_states = state.get("hooks")
        if hook_states is None:  # format 1 kept the best-metric record in meta
            hook_states = {"CheckpointHook": {"best": meta.get("best") or {}}}
        for key, hook in self._keyed_hooks():
            if key in hook_states:
                hook.load_state_dict(hook_states[key])
        rank = get_rank()
        if rank in state["rng"]:
            set_rng_state(state["rng"][rank])
        by_rank = state.get("task_by_rank", {})
        if rank in by_rank:
            self.task.load_rank_state_dict(by_rank[rank])
        log_ranks_without_state(state, bool(self.task.rank_state_dict()), type(self.task).__name__)

    def _keyed_hooks(self):
        """(key, hook): the class name, with `#2`, `#3` for further hooks of the same class."""
        seen: dict[str, int] = {}
        for hook in self.hooks:
            name = type(hook).__name__
            seen[name] = seen.get(name, 0) + 1
            yield (name if seen[name] == 1 else f"{name}#{seen[name]}"), hook

"""The training loop. It knows nothing of segmentation or GANs: it calls the task.

    trainer.fit():
        hook.before_train()                       for every hook, in priority order
        for iter in range(start_iter, max_iters):
            hook.before_iter()
            for each of train.accumulate micro-batches:
                batch = next(train data), moved to the device
                with autocast (amp.enabled), optim.micro_step(...):
                    step_logs = task.train_step(batch, optim)   # the task calls optim.step(loss, name)
            optim.end_iteration()                 # one GradScaler update per iteration
            hook.after_iter()                     Logger -> LRScheduler -> Eval -> Checkpoint -> user
        hook.after_train()

One iteration is one optimizer step (of every optimizer the task uses); `max_iters`, the LR
schedules and all intervals count iterations, whatever `accumulate` is.

SIGTERM or SIGINT during an iteration ends the run after that iteration: its after_iter hooks
run with `trainer.stop_signal` set (the CheckpointHook then saves whatever the interval), then
after_train, and `fit` returns; tools/train.py exits with 128 + the signal number. A signal
that arrives during the hooks is noticed after the next step. Under torchrun the ranks agree
on stopping at the same iteration (a signal seen by any rank stops all).

See framework/engine/hooks.py for what each built-in hook does and when.
"""

from __future__ import annotations

import logging
import random
import signal
import time

import numpy as np
import torch
from torch import nn

import framework
from framework.engine.dist import agree_on_stop, gather_by_rank, get_rank
from framework.engine.evaluation import evaluate, move_to_device
from framework.engine.stop import StopSignals

logger = logging.getLogger("framework")


class TrainData:
    """An endless stream of training batches that counts epochs and the position in the epoch.

    A new epoch re-seeds the sampler's order (`set_epoch`); resuming mid-epoch makes the
    sampler skip the samples already seen, so nothing is loaded to be thrown away.
    """

    def __init__(self, loader):
        self.loader = loader
        self.epoch = 0
        self.batches_in_epoch = 0  # batches consumed in the current epoch
        self._iterator = None

    def seek(self, epoch: int, batches_in_epoch: int) -> None:
        self.epoch, self.batches_in_epoch = epoch, batches_in_epoch
        self._iterator = None

    def next(self):
        if self._iterator is None:
            self.loader.sampler.set_epoch(self.epoch)
            self.loader.sampler.set_start(self.batches_in_epoch * self.loader.batch_size)
            self._iterator = iter(self.loader)
        try:
            batch = next(self._iterator)
        except StopIteration:
            self.epoch += 1
            self.batches_in_epoch = 0
            self._iterator = None
            return self.next()
        self.batches_in_epoch += 1
        return batch


class Trainer:
    def __init__(self, task: nn.Module, optim, train_loader, val_loader, metrics: list, hooks: list,
                 max_iters: int, work_dir: str, device: torch.device, config_text: str = "",
                 writer=None, overrides: list[str] | tuple[str, ...] = (), accumulate: int = 1,
                 amp_dtype: torch.dtype | None = None):
        self.task = task
        self.optim = optim
        self.data = TrainData(train_loader)
        self.val_loader = val_loader
        self.metrics = metrics
        self.hooks = sorted(hooks, key=lambda h: h.priority)
        self.max_iters = max_iters
        self.work_dir = work_dir
        self.device = device
        self.config_text = config_text  # the resolved config, saved in every checkpoint
        self.overrides = list(overrides)  # the command line's key=value overrides, likewise
        self.writer = writer  # a TensorBoard SummaryWriter on rank 0, None elsewhere
        self.accumulate = accumulate
        self.amp_dtype = amp_dtype  # None: full precision

        self.iter = 0  # completed iterations
        self.step_logs: dict = {}
        self.data_time = 0.0
        self.iter_time = 0.0
        self.last_metrics: dict[str, float] = {}
        self.last_metrics_iter = -1
        self.best: dict = {}
        self.stop_signal: signal.Signals | None = None  # set when SIGTERM/SIGINT ends the run early

    @property
    def epoch(self) -> int:
        return self.data.epoch

    def _call_hooks(self, stage: str) -> None:
        for hook in self.hooks:
            getattr(hook, stage)(self)

    def fit(self) -> None:
        """Train to max_iters, or until SIGTERM/SIGINT (then `self.stop_signal` names it)."""
        self.task.train()
        with StopSignals() as stop:
            self._call_hooks("before_train")
            while self.iter < self.max_iters and self.stop_signal is None:
                self._call_hooks("before_iter")
                start = time.perf_counter()
                self.step_logs = self._train_iteration()
                self.iter += 1
                self.iter_time = time.perf_counter() - start
                # read once per iteration (and agreed across ranks), so every hook and rank agrees
                self.stop_signal = agree_on_stop(stop.received)
                self._call_hooks("after_iter")
            self._call_hooks("after_train")

    def _train_iteration(self) -> dict:
        """One optimizer step over `accumulate` micro-batches; returns the averaged step logs."""
        summed: dict = {}
        self.data_time = 0.0
        for micro in range(self.accumulate):
            fetch_start = time.perf_counter()
            batch = move_to_device(self.data.next(), self.device)
            self.data_time += time.perf_counter() - fetch_start
            with self.optim.micro_step(micro, self.accumulate), \
                    torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
                logs = self.task.train_step(batch, self.optim)
            for key, value in logs.items():
                summed[key] = summed[key] + value if key in summed else value
        self.optim.end_iteration()
        logs = {k: v / self.accumulate for k, v in summed.items()} if self.accumulate > 1 else summed
        logs.update({f"grad_norm_{name}" if len(self.optim.names) > 1 else "grad_norm": norm
                     for name, norm in self.optim.grad_norms.items()})
        return logs

    def evaluate(self, num_images: int = 0) -> dict[str, float]:
        """Metrics on the validation loader; the first batch's visualisation goes to TensorBoard."""

        def write_images(i: int, batch: dict, outputs: dict) -> None:
            if i == 0 and num_images and self.writer is not None:
                for tag, image in self.task.visualize(batch, outputs, num_images).items():
                    self.writer.add_image(f"val/{tag}", image, self.iter)

        return evaluate(self.task, self.val_loader, self.metrics, self.device, on_batch=write_images)

    # ------------------------------------------------------------------ checkpoint state

    def state_dict(self) -> dict:
        """Everything an exact resume needs, as tensors and plain containers (weights_only-loadable):

        meta   counters (iteration, epoch, batches consumed in the epoch), the best metric so
               far, the resolved config and command-line overrides, framework and torch versions
        task   every network (and EMA copy) of the task
        optim  every optimizer and scheduler (see Optimizers.state_dict)
        rng    {rank: python, numpy, torch CPU and CUDA generator states}

        Under DDP every rank must call this (the random states are gathered); rank 0 saves.
        """
        return {
            "meta": {
                "iter": self.iter,
                "epoch": self.data.epoch,
                "batches_in_epoch": self.data.batches_in_epoch,
                "best": dict(self.best),
                "framework_version": framework.__version__,
                "torch_version": str(torch.__version__),
                "config": self.config_text,
                "overrides": list(self.overrides),
            },
            "task": self.task.state_dict(),
            "optim": self.optim.state_dict(),
            "rng": gather_by_rank(rng_state()),
        }

    def load_state_dict(self, state: dict) -> None:
        meta = state["meta"]
        self.task.load_state_dict(state["task"])
        self.optim.load_state_dict(state["optim"])
        self.iter = meta["iter"]
        self.data.seek(meta["epoch"], meta["batches_in_epoch"])
        self.best = dict(meta.get("best") or {})
        rank = get_rank()
        if rank in state["rng"]:
            set_rng_state(state["rng"][rank])
        else:
            logger.warning(f"warning: the checkpoint has no random state for rank {rank} (it has ranks "
                           f"{sorted(state['rng'])}); this rank keeps its fresh seed, so the resume is not exact")


def rng_state() -> dict:
    """Random generator states as tensors and ints (loadable with weights_only=True)."""
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": torch.from_numpy(keys.astype(np.int64)),
        "numpy_pos": int(pos),
        "numpy_gauss": [int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    has_gauss, gauss = state["numpy_gauss"]
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_pos"],
                         int(has_gauss), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

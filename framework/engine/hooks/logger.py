"""LoggerHook (priority 10): losses, learning rates and timings to the console and the loggers."""

from __future__ import annotations

import datetime
import logging
import sys
from typing import TYPE_CHECKING

import torch

from framework.dist import all_reduce_mean, is_main
from framework.engine.hooks.base import Hook, due, every
from framework.registry import HOOKS

if TYPE_CHECKING:
    from framework.engine.trainer import Trainer

logger = logging.getLogger("framework")


@HOOKS.register()
class LoggerHook(Hook):
    """Averages step logs over the interval and writes them out.

    Step losses stay on the device, kept as they come, until the log interval; then they are
    averaged, stacked, averaged across ranks and copied to the host: one synchronisation per interval.
    Each key is averaged over the steps that logged it (a GAN with d_steps_per_g_step > 1
    logs generator losses on some steps only).
    """

    priority = 10

    def __init__(self, interval: int = 50, progress_bar: str | bool = "auto"):
        self.interval = interval
        self.progress_bar = progress_bar
        self.bar = None

    def before_train(self, trainer: Trainer) -> None:
        self._reset()
        show = sys.stdout.isatty() if self.progress_bar == "auto" else bool(self.progress_bar)
        if show and is_main():
            from tqdm import tqdm

            self.bar = tqdm(total=trainer.max_iters, initial=trainer.iter, file=sys.stdout, dynamic_ncols=True,
                            leave=False)

    def before_iter(self, trainer: Trainer) -> None:
        # Details that cost a little per step (gradient norms, a task's diagnostics) are measured
        # on the iterations whose logs are written only.
        trainer.optim.log_details = due(trainer.iter + 1, trainer.max_iters, self.interval)

    def _reset(self) -> None:
        self._values: dict[str, list[torch.Tensor]] = {}  # summed at the interval: no device op per step
        self._steps = 0
        self._data_time = 0.0
        self._iter_time = 0.0

    def after_iter(self, trainer: Trainer) -> None:
        for key, value in trainer.step_logs.items():
            if not isinstance(value, torch.Tensor):
                value = torch.tensor(float(value))
            elif value.requires_grad:  # tasks log detached values; a detach per key per step costs
                value = value.detach()
            self._values.setdefault(key, []).append(value)
        self._steps += 1
        self._data_time += trainer.data_time
        self._iter_time += trainer.iter_time
        if self.bar is not None:
            self.bar.update(1)
        if every(trainer, self.interval) or trainer.stop_signal:
            trainer.ensure_finite()  # a diverged run stops here rather than logging NaN
            values = self._averages()
            self._write(trainer, values)
            if is_main():
                for warning in trainer.task.diagnose(values):
                    logger.warning(warning)
            self._reset()

    def _averages(self) -> dict[str, float]:
        """Each key's mean over the interval and the ranks: the one host sync."""
        keys = sorted(self._values)
        if not keys:
            return {}
        device = self._values[keys[0]][0].device
        stacked = torch.stack([torch.stack(self._values[k]).to(device).float().mean() for k in keys])
        return dict(zip(keys, all_reduce_mean(stacked).tolist()))

    def _write(self, trainer: Trainer, values: dict[str, float]) -> None:
        if not is_main():
            return
        lrs = trainer.optim.lrs()
        data_time = self._data_time / self._steps
        iter_time = self._iter_time / self._steps
        eta = datetime.timedelta(seconds=int(iter_time * (trainer.max_iters - trainer.iter)))
        parts = [f"iter {trainer.iter}/{trainer.max_iters}", f"epoch {trainer.epoch}"]
        parts += [f"{k} {v:.4f}" for k, v in values.items()]
        parts += [f"lr_{n} {lr:.3e}" if len(lrs) > 1 else f"lr {lr:.3e}" for n, lr in lrs.items()]
        parts += [f"data {data_time:.4f}s", f"time {iter_time:.4f}s", f"eta {eta}"]
        if trainer.optim.skipped_steps:
            parts.append(f"skipped_steps {trainer.optim.skipped_steps}")
        if torch.cuda.is_available() and trainer.device.type == "cuda":
            parts.append(f"mem {torch.cuda.max_memory_allocated(trainer.device) / 2**20:.0f}M")
        if self.bar is not None:
            self.bar.clear()  # the log line replaces the bar, which redraws below it
        logger.info("  ".join(parts))
        if self.bar is not None:
            self.bar.refresh()
        if trainer.loggers:
            scalars = {**values, "data_time": data_time, "iter_time": iter_time}
            scalars.update({"lr" if len(lrs) == 1 else f"lr_{name}": lr for name, lr in lrs.items()})
            if trainer.optim.skip_nonfinite:
                scalars["skipped_steps"] = trainer.optim.skipped_steps
            trainer.loggers.log_scalars({f"train/{key}": value for key, value in scalars.items()}, trainer.iter)

    def after_train(self, trainer: Trainer) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        trainer.loggers.flush()

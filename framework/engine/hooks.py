"""Hooks: everything the training loop does besides the step itself.

A hook overrides any of `before_train`, `before_iter`, `after_iter`, `after_train`; each
receives the Trainer. Hooks run in ascending `priority` (built-ins below; user hooks from
the config's `hooks:` list default to 50, after every built-in):

    10 LoggerHook        losses/lr/timings to console, progress bar, TensorBoard
    20 LRSchedulerHook   every scheduler steps once per iteration
    30 EvalHook          evaluation every train.val_interval and at the end
    40 CheckpointHook    iter_<N>.pth every train.ckpt_interval, at the end and when a
                         SIGTERM/SIGINT stops the run; best.pth

`trainer.iter` counts completed iterations, so in after_iter the first call sees iter == 1.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import sys
import time
from pathlib import Path

import torch

from framework.engine import checkpoint as ckpt
from framework.engine.dist import all_reduce_mean, is_main
from framework.errors import ConfigError
from framework.registry import HOOKS

logger = logging.getLogger("framework")


class Hook:
    priority = 50

    def before_train(self, trainer) -> None:
        pass

    def before_iter(self, trainer) -> None:
        pass

    def after_iter(self, trainer) -> None:
        pass

    def after_train(self, trainer) -> None:
        pass


def _every(trainer, interval: int) -> bool:
    """True every `interval` iterations and at the last one (interval 0: never)."""
    return bool(interval) and (trainer.iter % interval == 0 or trainer.iter == trainer.max_iters)


class ProgressBar:
    """A one-line bar redrawn in place, only when stdout is a terminal."""

    def __init__(self, total: int):
        self.total = total
        self._last_draw = 0.0

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if now - self._last_draw < 0.2 and done != self.total:
            return
        self._last_draw = now
        width = 30
        filled = int(width * done / max(self.total, 1))
        sys.stdout.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total}")
        sys.stdout.flush()

    def clear(self) -> None:
        sys.stdout.write("\r\033[K")


@HOOKS.register()
class LoggerHook(Hook):
    """Averages step logs over the interval and writes them out.

    Step losses stay on the device, summed, until the log interval; then one stacked tensor
    is averaged across ranks and copied to the host: one synchronisation per interval.
    Each key is averaged over the steps that logged it (a GAN with d_steps_per_g_step > 1
    logs generator losses on some steps only).
    """

    priority = 10

    def __init__(self, interval: int = 50, progress_bar: str | bool = "auto"):
        self.interval = interval
        self.progress_bar = progress_bar

    def before_train(self, trainer) -> None:
        self._reset()
        show = sys.stdout.isatty() if self.progress_bar == "auto" else bool(self.progress_bar)
        self.bar = ProgressBar(trainer.max_iters) if show and is_main() else None

    def _reset(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}
        self._steps = 0
        self._data_time = 0.0
        self._iter_time = 0.0

    def after_iter(self, trainer) -> None:
        for key, value in trainer.step_logs.items():
            value = value.detach().float() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
            self._sums[key] = self._sums[key] + value if key in self._sums else value
            self._counts[key] = self._counts.get(key, 0) + 1
        self._steps += 1
        self._data_time += trainer.data_time
        self._iter_time += trainer.iter_time
        if self.bar is not None:
            self.bar.update(trainer.iter)
        if _every(trainer, self.interval) or trainer.stop_signal:
            self._write(trainer)
            self._reset()

    def _write(self, trainer) -> None:
        keys = sorted(self._sums)
        values: dict[str, float] = {}
        if keys:
            device = self._sums[keys[0]].device
            stacked = torch.stack([self._sums[k].to(device) / self._counts[k] for k in keys])
            values = dict(zip(keys, all_reduce_mean(stacked).tolist()))  # the one host sync
        if not is_main():
            return
        lrs = trainer.optim.lrs()
        data_time = self._data_time / self._steps
        iter_time = self._iter_time / self._steps
        eta = datetime.timedelta(seconds=int(iter_time * (trainer.max_iters - trainer.iter)))
        parts = [f"iter {trainer.iter}/{trainer.max_iters}", f"epoch {trainer.epoch}"]
        parts += [f"{k} {v:.4f}" for k, v in values.items()]
        parts += [f"lr_{n} {lr:.3e}" if len(lrs) > 1 else f"lr {lr:.3e}" for n, lr in lrs.items()]
        parts += [f"data {data_time:.3f}s", f"time {iter_time:.3f}s", f"eta {eta}"]
        if torch.cuda.is_available() and trainer.device.type == "cuda":
            parts.append(f"mem {torch.cuda.max_memory_allocated(trainer.device) / 2**20:.0f}M")
        if self.bar is not None:
            self.bar.clear()
        logger.info("  ".join(parts))
        if trainer.writer is not None:
            for key, value in values.items():
                trainer.writer.add_scalar(f"train/{key}", value, trainer.iter)
            for name, lr in lrs.items():
                trainer.writer.add_scalar("train/lr" if len(lrs) == 1 else f"train/lr_{name}", lr, trainer.iter)
            trainer.writer.add_scalar("train/data_time", data_time, trainer.iter)
            trainer.writer.add_scalar("train/iter_time", iter_time, trainer.iter)

    def after_train(self, trainer) -> None:
        if self.bar is not None:
            self.bar.clear()
        if trainer.writer is not None:
            trainer.writer.flush()


@HOOKS.register()
class LRSchedulerHook(Hook):
    priority = 20

    def after_iter(self, trainer) -> None:
        trainer.optim.step_schedulers()


def _json_safe(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}


@HOOKS.register()
class EvalHook(Hook):
    """Evaluates, then reports: console, TensorBoard scalars and images, metrics.jsonl."""

    priority = 30

    def __init__(self, interval: int = 1000, at_start: bool = False, num_images: int = 4):
        self.interval = interval
        self.at_start = at_start
        self.num_images = num_images

    def before_train(self, trainer) -> None:
        if trainer.iter and is_main():
            self._forget_after(trainer.iter, Path(trainer.work_dir) / "metrics.jsonl")
        if self.at_start and trainer.iter == 0 and trainer.val_loader is not None:
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

    def after_iter(self, trainer) -> None:
        if trainer.val_loader is not None and _every(trainer, self.interval):
            self._run(trainer)

    def _run(self, trainer) -> None:
        metrics = trainer.evaluate(num_images=self.num_images)
        trainer.last_metrics, trainer.last_metrics_iter = metrics, trainer.iter
        if not is_main():
            return
        summary = {k: v for k, v in metrics.items() if "." not in k}  # per-class keys hold a dot
        line = "  ".join(f"{k} {v:.4f}" for k, v in summary.items()) or "no metrics configured"
        logger.info(f"val iter {trainer.iter}: {line}")
        if trainer.writer is not None:
            for key, value in metrics.items():
                if not math.isnan(value):
                    trainer.writer.add_scalar(f"val/{key}", value, trainer.iter)
            trainer.writer.flush()
        record = {"iter": trainer.iter, "epoch": trainer.epoch, **_json_safe(metrics)}
        with open(Path(trainer.work_dir) / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


@HOOKS.register()
class CheckpointHook(Hook):
    priority = 40

    def __init__(self, interval: int = 1000, keep_last: int = 3, best_metric: str | None = None,
                 best_mode: str = "max"):
        self.interval = interval
        self.keep_last = keep_last
        self.best_metric = best_metric
        self.best_mode = best_mode

    def before_train(self, trainer) -> None:
        if is_main():
            for path in ckpt.remove_stale_temp_files(Path(trainer.work_dir) / "checkpoints"):
                logger.info(f"removed {path.name}, left by a checkpoint write that was interrupted")

    def after_iter(self, trainer) -> None:
        folder = Path(trainer.work_dir) / "checkpoints"
        save_iter = _every(trainer, self.interval) or trainer.stop_signal is not None
        save_best = self._improved(trainer)
        if not (save_iter or save_best):
            return
        state = trainer.state_dict()  # on every rank: it gathers each rank's random state
        if not is_main():
            return
        if save_iter:
            name = f"iter_{trainer.iter}.pth"
            ckpt.save_checkpoint(state, folder / name)
            ckpt.write_latest(folder, name)  # only after the file is complete
            ckpt.prune(folder, self.keep_last)
            if trainer.stop_signal is not None:
                logger.info(f"stopped by {trainer.stop_signal.name} at iteration {trainer.iter}: saved "
                            f"{folder / name}; continue with --resume")
        if save_best:
            ckpt.save_checkpoint(state, folder / "best.pth")
            logger.info(f"new best {self.best_metric} {trainer.best['value']:.4f} at iter {trainer.iter}")

    def _improved(self, trainer) -> bool:
        if not self.best_metric or trainer.last_metrics_iter != trainer.iter:
            return False
        if self.best_metric not in trainer.last_metrics:
            have = ", ".join(k for k in trainer.last_metrics if "." not in k)
            raise ConfigError(f"train.best_metric: '{self.best_metric}' is not a metric of this run (have: {have})")
        value = trainer.last_metrics[self.best_metric]
        best = trainer.best.get("value")
        better = best is None or (value > best if self.best_mode == "max" else value < best)
        if better and not math.isnan(value):
            trainer.best = {"metric": self.best_metric, "value": value, "iter": trainer.iter}
            return True
        return False

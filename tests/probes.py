"""Code that processes started by tests run: imported through `custom_imports`, or the target
of a forked process.

`LossRecorderHook` appends every iteration's losses to a file, exactly (float.hex), with one
unbuffered write per line so a SIGKILL never leaves a half line; `delay` slows iterations down
so a test can interrupt a run near a chosen iteration. `CrashOnFirstAttemptHook` makes a
torchrun worker die at a given iteration of its first attempt only; `SigkillAtIterationHook` kills
a run with SIGKILL at the end of an iteration. `stall_checkpoint_write`
starts writing a checkpoint and hangs halfway, for a test to kill it there. `NaNAtIteration`
and `InfGradientAtIteration` wrap a loss to make one iteration's loss, or only its gradients,
non-finite. `CollectorStateHook` writes the garbage collector's state as training starts.
`UnpoolingNet` is a SegNet-style network (max-pooling indices reused by max-unpooling), whose
unpooling has no deterministic kernel in torch, on the CPU either.
"""

import gc
import json
import os
import time
import weakref
from pathlib import Path

import torch

from framework.checkpoint import files as ckpt
from framework.dist import get_rank
from framework.engine.hooks import Hook
from framework.registry import HOOKS, LOSSES, MODELS


@HOOKS.register()
class LossRecorderHook(Hook):
    priority = 60  # after every built-in hook, the checkpoint included

    def __init__(self, path: str, delay: float = 0.0):
        self.path = path
        self.delay = delay

    def after_iter(self, trainer) -> None:
        losses = " ".join(f"{k}={float(v).hex()}" for k, v in sorted(trainer.step_logs.items()))
        path = self.path if get_rank() == 0 else f"{self.path}.rank{get_rank()}"  # each rank its own losses
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{trainer.iter} {losses}\n".encode())
        finally:
            os.close(fd)
        time.sleep(self.delay)


def read_losses(path) -> list[tuple[int, str]]:
    """(iteration, losses) per recorded line, in the order written (resumed runs repeat some)."""
    records = []
    for line in open(path, encoding="utf-8").read().splitlines():
        iteration, _, losses = line.partition(" ")
        records.append((int(iteration), losses))
    return records


@HOOKS.register()
class CrashOnFirstAttemptHook(Hook):
    priority = 70

    def __init__(self, iteration: int, rank: int | None = None):
        self.iteration = iteration
        self.rank = rank  # None: every rank dies

    def after_iter(self, trainer) -> None:
        if trainer.iter == self.iteration and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0" \
                and self.rank in (None, get_rank()):
            os._exit(1)  # as abrupt as a crash: no cleanup, no checkpoint


@HOOKS.register()
class SigkillAtIterationHook(Hook):
    """SIGKILL the run at the end of `iteration`: after every built-in hook (its checkpoint saved)."""

    priority = 70

    def __init__(self, iteration: int):
        self.iteration = iteration

    def after_iter(self, trainer) -> None:
        if trainer.iter == self.iteration:
            os.kill(os.getpid(), 9)


def stall_checkpoint_write(path: str, ready_file: str) -> None:
    """Save a checkpoint to `path` through the real atomic writer, but stop halfway through the
    bytes: touch `ready_file` and sleep until killed."""

    def half_then_hang(state, f):
        f.write(b"PK\x03\x04" + bytes(1 << 20))  # the start of a zip archive, as torch.save writes
        f.flush()
        Path(ready_file).touch()
        time.sleep(3600)

    torch.save = half_then_hang
    ckpt.save_checkpoint({"weights": torch.zeros(4)}, path)


@LOSSES.register()
class NaNAtIteration(torch.nn.Module):
    """Wraps a loss; returns NaN at training call `iteration` (1-based; every call from `iteration`
    on with `stay`), on every rank or on `rank` only."""

    def __init__(self, loss: torch.nn.Module, iteration: int, rank: int | None = None, stay: bool = False):
        super().__init__()
        self.loss = loss
        self.iteration, self.rank, self.stay = iteration, rank, stay
        self.calls = 0

    def forward(self, logits, target):
        value = self.loss(logits, target)
        self.calls += 1
        hit = self.calls >= self.iteration if self.stay else self.calls == self.iteration
        if hit and self.rank in (None, get_rank()):
            return value * float("nan")
        return value


@HOOKS.register()
class FillDiskHook(Hook):
    """At iteration `iteration`, fill the file system of the work dir (a small tmpfs in the test)."""

    priority = 35  # after evaluation, before the checkpoint

    def __init__(self, iteration: int, leave_kib: int = 0):
        self.iteration = iteration
        self.leave_kib = leave_kib  # free this much again: the checkpoint then fails part-way through

    def after_iter(self, trainer) -> None:
        if trainer.iter != self.iteration:
            return
        filler = Path(trainer.work_dir) / "filler"
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(bytes(1 << 12))
                    f.flush()
        except OSError:
            pass
        if self.leave_kib:
            os.truncate(filler, max(0, filler.stat().st_size - self.leave_kib * 1024))


class _InfGradient(torch.autograd.Function):
    """Identity forward; an infinite gradient backward (as a float16 overflow makes)."""

    @staticmethod
    def forward(ctx, value):
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


@LOSSES.register()
class InfGradientAtIteration(torch.nn.Module):
    """Wraps a loss; at training call `iteration` (1-based) the loss value stays finite but its
    gradients are infinite: what a float16 GradScaler must skip and back off from."""

    def __init__(self, loss: torch.nn.Module, iteration: int):
        super().__init__()
        self.loss = loss
        self.iteration = iteration
        self.calls = 0

    def forward(self, logits, target):
        value = self.loss(logits, target)
        self.calls += 1
        return _InfGradient.apply(value) if self.calls == self.iteration else value


@HOOKS.register()
class CollectorStateHook(Hook):
    """Writes `path`: the garbage collector's state as training starts; and, per rank, the file
    `path`.freed.r<rank> when the task's DDP wrappers are freed, saying whether the process
    group was still up then (it must be: torn down later, gloo aborted a finished rank)."""

    def __init__(self, path: str):
        self.path = path

    def before_train(self, trainer) -> None:
        if get_rank() == 0:
            Path(self.path).write_text(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
        wrappers = [m for m in trainer.task.children() if isinstance(m, torch.nn.parallel.DistributedDataParallel)]
        marker = Path(f"{self.path}.freed.r{get_rank()}")
        self.trainer = trainer  # as many hooks do: trainer -> hook -> trainer, a cycle only the collector frees
        for wrapper in wrappers:
            # atexit False: only a real release writes it, not the interpreter's exit
            weakref.finalize(wrapper, _note_release, marker).atexit = False


def _note_release(marker: Path) -> None:
    with marker.open("a") as out:
        out.write(f"{torch.distributed.is_initialized()}\n")


@MODELS.register()
class UnpoolingNet(torch.nn.Module):
    """conv -> max-pool (indices) -> conv -> max-unpool -> 1x1 conv to class scores."""

    def __init__(self, in_channels: int = 3, num_classes: int = 2, channels: int = 8):
        super().__init__()
        self.encode = torch.nn.Conv2d(in_channels, channels, 3, padding=1)
        self.middle = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.classify = torch.nn.Conv2d(channels, num_classes, 1)

    def forward(self, x):
        features, indices = torch.nn.functional.max_pool2d(torch.relu(self.encode(x)), 2, return_indices=True)
        features = torch.nn.functional.max_unpool2d(torch.relu(self.middle(features)), indices, 2,
                                                    output_size=x.shape[-2:])
        return self.classify(features)

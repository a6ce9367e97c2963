"""Optimizers by name, and the one object through which a task updates its networks.

Config, one optimizer (named "main", over every trainable parameter of the task):

    optim: {type: AdamW, lr: 1.0e-3, weight_decay: 1.0e-4,
            scheduler: {type: WarmupPolyLR, warmup_iters: 100}, clip_grad: {max_norm: 5.0}}

or several, each over the parameters of named submodules of the task:

    optimizers:
      generator:     {type: Adam, lr: 2.0e-4, betas: [0.5, 0.999], params: generator}
      discriminator: {type: Adam, lr: 2.0e-4, betas: [0.5, 0.999], params: [discriminator]}

Every trainable parameter belongs to exactly one optimizer: one in two entries, or in none (a
network that would keep its initial weights), is refused at start-up (framework/optim/ownership.py);
a network meant to stay fixed is `frozen:` in its model node.

A task calls `optim.update(loss, "generator")`; zero_grad(set_to_none), backward, clipping and
the optimizer step all happen here, so tasks never touch them.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from contextlib import ExitStack, contextmanager

import torch
from torch import nn

from framework.dist import all_reduce_min
from framework.errors import ConfigError, NonFiniteError
from framework.registry import OPTIMIZERS

logger = logging.getLogger("framework")


def _register_torch_optimizers() -> None:
    """Every torch.optim optimizer, usable by its class name (registered on first lookup)."""
    for name, cls in vars(torch.optim).items():
        if inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            OPTIMIZERS.add(cls, name)


OPTIMIZERS.add_source(_register_torch_optimizers)

# Keys of an optimizer entry that are ours, not the torch optimizer's.
ENTRY_KEYS = ("params", "param_groups", "scheduler", "clip_grad")


class Optimizers:
    """The named optimizers of a run with their schedulers, gradient clipping, AMP loss
    scaling, gradient accumulation and the `skip` non-finite policy.

    One GradScaler serves every optimizer (float16 AMP): each `scaler.step(opt)` skips that
    optimizer's step when its gradients hold inf/NaN, and the scale is updated once per
    iteration in `end_iteration()`. Gradients are unscaled before clipping.
    """

    def __init__(self, optimizers: dict[str, torch.optim.Optimizer],
                 clip_grad: dict[str, dict] | None = None,
                 schedulers: dict[str, torch.optim.lr_scheduler.LRScheduler] | None = None,
                 scaler: torch.amp.GradScaler | None = None,
                 skip_nonfinite: bool = False, max_skips: int = 10):
        self.optimizers = optimizers
        self.clip_grad = clip_grad or {}
        self.schedulers = schedulers or {}
        self.scaler = scaler
        self.ddp_networks: list = []  # DDP wrappers kept in no_sync() while accumulating
        self.grad_norms: dict[str, torch.Tensor] = {}  # this iteration's pre-clip norms, on the device
        # Whether this iteration's logs are written (the LoggerHook sets it): then gradient norms
        # are measured without clipping too, and tasks may log costlier diagnostics.
        self.log_details = True
        self._micro_step, self._micro_steps = 0, 1
        # train.nan_policy: skip
        self.skip_nonfinite = skip_nonfinite
        self.max_skips = max_skips
        self.skipped_steps = 0  # optimizer steps skipped for a non-finite loss, over the run
        self._consecutive_skips = 0  # iterations in a row with a skipped step
        self._skipped_this_iteration = False
        self._finite: dict[str, torch.Tensor] = {}  # per optimizer, over the micro-batches
        self._scaler_stepped = False  # a scaler.step this iteration: what scaler.update() needs

    @property
    def names(self) -> list[str]:
        return list(self.optimizers)

    def _resolve(self, name: str | None) -> str:
        if name is None:
            if len(self.optimizers) != 1:
                raise ValueError(f"several optimizers ({', '.join(self.optimizers)}): name the one to update")
            return next(iter(self.optimizers))
        if name not in self.optimizers:
            raise KeyError(f"no optimizer named '{name}' (have: {', '.join(self.optimizers)})")
        return name

    def params(self, name: str | None = None) -> list[nn.Parameter]:
        return [p for group in self.optimizers[self._resolve(name)].param_groups for p in group["params"]]

    @contextmanager
    def micro_step(self, index: int, total: int):
        """Run one of `total` micro-batches of an optimizer step (gradient accumulation).

        Losses are divided by `total`; gradients are zeroed on the first micro-batch and
        applied on the last; before the last, DDP's gradient all-reduce is skipped
        (no_sync must cover the forward too, so it wraps the whole task step).
        """
        self._micro_step, self._micro_steps = index, total
        with ExitStack() as stack:
            if index < total - 1:
                for network in self.ddp_networks:
                    stack.enter_context(network.no_sync())
            try:
                yield
            finally:
                self._micro_step, self._micro_steps = 0, 1

    def update(self, loss: torch.Tensor, name: str | None = None) -> None:
        """Update the network(s) of optimizer `name` from `loss`: zero_grad (first micro-batch)
        -> scaled backward -> on the last micro-batch: unscale -> clip -> step."""
        name = self._resolve(name)
        optimizer = self.optimizers[name]
        first, last = self._micro_step == 0, self._micro_step == self._micro_steps - 1
        if first:
            optimizer.zero_grad(set_to_none=True)
        if self.skip_nonfinite:
            finite = torch.isfinite(loss.detach())
            self._finite[name] = finite if first else self._finite[name] & finite
        if self._micro_steps > 1:
            loss = loss / self._micro_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        if torch.is_autocast_enabled(loss.device.type):
            with torch.autocast(device_type=loss.device.type, enabled=False):  # backward in the forward's dtypes
                loss.backward()
        else:
            loss.backward()
        if not last:
            return
        if self.skip_nonfinite and not self._agree_finite(name):
            optimizer.zero_grad(set_to_none=True)
            self.skipped_steps += 1
            self._skipped_this_iteration = True
            return
        self._step(name, optimizer)

    def _agree_finite(self, name: str) -> bool:
        """Whether every rank's loss for `name` was finite (one sync: the skip policy's cost)."""
        flag = self._finite.pop(name).to(torch.int32)
        return bool(all_reduce_min(flag).item())

    def _step(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        clip = self.clip_grad.get(name)
        if clip or self.log_details:
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)  # clip/measure the true gradients, not the scaled ones
            if clip:
                self.grad_norms[name] = nn.utils.clip_grad_norm_(self.params(name), **clip)
            else:
                grads = [p.grad for p in self.params(name) if p.grad is not None]
                self.grad_norms[name] = nn.utils.get_total_norm(grads)
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self._scaler_stepped = True
        else:
            optimizer.step()

    def end_iteration(self) -> bool:
        """Once per iteration, after every optimizer has stepped: update the loss scale; under
        the skip policy, raise after too many iterations in a row with a skipped step.
        Returns whether a step of this iteration was skipped for a non-finite loss."""
        if self._scaler_stepped:  # not when the skip policy skipped every step: the scale stays
            self.scaler.update()
        self._scaler_stepped = False
        if not self.skip_nonfinite:
            return False
        skipped, self._skipped_this_iteration = self._skipped_this_iteration, False
        self._consecutive_skips = self._consecutive_skips + 1 if skipped else 0
        if self._consecutive_skips > self.max_skips:
            raise NonFiniteError(
                f"training diverged: the loss was not finite in {self._consecutive_skips} iterations in a row "
                f"(train.nan_policy=skip allows {self.max_skips}, train.nan_max_skips); "
                "checkpoints and best.pth from before it are kept")
        return skipped

    def take_grad_norms(self) -> dict[str, torch.Tensor]:
        """This iteration's gradient norms (clipped or measured optimizers), then forgotten."""
        norms, self.grad_norms = self.grad_norms, {}
        return norms

    def step_schedulers(self) -> None:
        for scheduler in self.schedulers.values():
            scheduler.step()

    def lrs(self) -> dict[str, float]:
        """Current learning rate of each optimizer (its first parameter group)."""
        return {name: opt.param_groups[0]["lr"] for name, opt in self.optimizers.items()}

    def state_dict(self) -> dict:
        """Everything this object owns that a resume must restore, by optimizer name (it is the
        checkpoint's `optim` entry), including the gradient scaler."""
        state = {
            "optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
            "schedulers": {n: s.state_dict() for n, s in self.schedulers.items()},
            "skipped_steps": self.skipped_steps,
        }
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a checkpoint's states. A schedule's length (`max_iters` of the Warmup*
        schedules) is the config's, not the checkpoint's: resuming with a larger train.max_iters
        extends the schedule, and the learning rate from the resumed iteration on is that of a
        run configured with the new length from the start."""
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
        for name, sched in self.schedulers.items():
            length = getattr(sched, "max_iters", None)
            sched.load_state_dict(state["schedulers"][name])
            if length is not None and sched.max_iters != length:
                logger.info(f"optimizer {name}: schedule {type(sched).__name__} stretched from max_iters "
                            f"{sched.max_iters} to {length}")
                sched.max_iters = length
                restart_lr(sched)
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = state.get("skipped_steps", 0)


def restart_lr(scheduler) -> None:
    """Set the optimizer's learning rates to the schedule's value at its current iteration
    (closed form: the Warmup* schedules compute it from `last_epoch` alone)."""
    lrs = scheduler.get_lr()
    for group, lr in zip(scheduler.optimizer.param_groups, lrs):
        group["lr"] = lr
    scheduler._last_lr = list(lrs)  # what get_last_lr() reports; torch keeps it in this attribute


def build_optimizers(cfg: Mapping, task: nn.Module, max_iters: int, scaler: torch.amp.GradScaler | None = None,
                     skip_nonfinite: bool = False, max_skips: int = 10) -> Optimizers:
    """Build from the config's `optim` (one) or `optimizers` (by name) section."""
    from framework.optim.fused import with_fused_default
    from framework.optim.ownership import claim_params, refuse_unoptimized
    from framework.optim.param_groups import split_param_groups
    from framework.optim.schedulers import build_scheduler

    if cfg.get("optimizers"):
        entries, prefix = dict(cfg["optimizers"]), "optimizers."
    elif cfg.get("optim"):
        entries, prefix = {"main": cfg["optim"]}, ""
    else:
        raise ConfigError("the config has no 'optim' section (e.g. optim: {type: AdamW, lr: 1.0e-3})")

    optimizers, clips, schedulers = {}, {}, {}
    owner: dict[int, str] = {}
    for name, entry in entries.items():
        path = f"{prefix}{name}" if prefix else "optim"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{path}: expected an optimizer node like {{type: Adam, lr: 1.0e-3}}, got {entry!r}")
        node = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
        params = claim_params(task, entry.get("params"), path, name, owner)
        groups = split_param_groups(task, params, node, entry.get("param_groups"), path)
        fused_default = with_fused_default(node, params, groups, path, float16=scaler is not None)
        optimizers[name] = OPTIMIZERS.build(fused_default, path=path, params=groups)
        if entry.get("clip_grad"):
            clips[name] = dict(entry["clip_grad"])
        if entry.get("scheduler"):
            schedulers[name] = build_scheduler(entry["scheduler"], optimizers[name], max_iters,
                                               path=f"{path}.scheduler")
    missing = [n for n in getattr(task, "required_optimizers", ()) if n not in optimizers]
    if missing:  # fail now, not with a KeyError at the first training step
        raise ConfigError(
            f"{prefix.rstrip('.') or 'optim'}: {type(task).__name__} updates optimizers named "
            f"{', '.join(task.required_optimizers)}; missing {', '.join(missing)} "
            f"(declare them under optimizers:, each with params: <submodule>)"
        )
    refuse_unoptimized(task, owner, prefix.rstrip(".") or "optim")
    return Optimizers(optimizers, clips, schedulers, scaler, skip_nonfinite, max_skips)

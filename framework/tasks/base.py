"""The contract between the engine and what a training step means.

A Task is an nn.Module holding its networks (and losses). The engine calls only:

    train_iteration(batches, optim) -> dict of detached scalar tensors to log, averaged over the
                             micro-batches (`len(batches)` is train.accumulate). The default runs
                             `train_step` on each micro-batch; a task whose optimizers must see all
                             micro-batches in another order (a GAN: every D micro-batch, the D
                             step, then the G ones) overrides it.
    train_step(batch, optim) -> dict of detached scalar tensors to log (`loss`, `loss_ce`, ...)
    val_step(batch)          -> outputs that the run's metrics read (e.g. pred, target)
    visualize(batch, outputs, max_images) -> {tag: 3xHxW float image in [0, 1]} for TensorBoard
    save_visuals(batch, outputs, folder)  -> writes viewable images (tools/test.py --show-dir)
    diagnose(logged)         -> warnings from the logs averaged over a log interval (default none)
    networks()               -> {name: module} trained by the optimizers (each DDP-wrapped apart)
    required_optimizers      names the task passes to optim.update (checked when optimizers are built)
    rank_state_dict() / load_rank_state_dict(state)
                             state each process keeps for itself (CycleGAN's image pools): the
                             engine gathers it from every rank into the checkpoint and gives each
                             rank its own back on resume (default: none)

A task never calls backward, zero_grad or an optimizer's step: `optim.update(loss, name)` does
(see `UpdatesNetworks` for everything a task may call on `optim`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Protocol

import torch
from torch import nn


class UpdatesNetworks(Protocol):
    """What a task may call on the `optim` object the engine passes (framework/optim/optimizers.py)."""

    names: list[str]
    log_details: bool  # this iteration's logs are written: worth measuring costlier diagnostics

    def update(self, loss: torch.Tensor, name: str | None = None) -> None:
        """Backward `loss` and step optimizer `name` (the only one when None), with accumulation,
        loss scaling and clipping handled."""

    def micro_step(self, index: int, total: int):
        """Context for micro-batch `index` of `total` within one optimizer step."""


class Task(nn.Module):
    required_optimizers: tuple[str, ...] = ()

    def train_iteration(self, batches: list[dict], optim: UpdatesNetworks) -> dict:
        if len(batches) == 1:  # nothing to accumulate: the optimizers' default micro-step is 0 of 1
            return self.train_step(batches[0], optim)
        logs = []
        for index, batch in enumerate(batches):
            with optim.micro_step(index, len(batches)):
                logs.append(self.train_step(batch, optim))
        return average_logs(logs)

    def train_step(self, batch: dict, optim: UpdatesNetworks) -> dict:
        raise NotImplementedError

    def val_step(self, batch: dict) -> dict:
        raise NotImplementedError

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        return {}

    def diagnose(self, logged: dict[str, float]) -> list[str]:
        """Warnings read from the logs averaged over a log interval (e.g. a GAN's collapse)."""
        return []

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        pass

    def rank_state_dict(self) -> dict:
        """This process's own state, not shared by the ranks (unlike the networks'); {}: none."""
        return {}

    def load_rank_state_dict(self, state: dict) -> None:  # noqa: B027 (optional)
        """Restore what `rank_state_dict` returned in this rank before the checkpoint."""

    def networks(self) -> dict[str, nn.Module]:
        """Submodules with trainable parameters (an EMA copy or a loss has none)."""
        return {name: module for name, module in self.named_children()
                if any(p.requires_grad for p in module.parameters())}


def total_loss(terms: dict[str, torch.Tensor]) -> torch.Tensor:
    """The sum of the loss terms (not `sum()`, whose start value 0 costs an addition per step)."""
    values = iter(terms.values())
    loss = next(values)
    for value in values:
        loss = loss + value
    return loss


def average_logs(logs: list[dict]) -> dict:
    """Each key's mean over the micro-batches that logged it."""
    if len(logs) == 1:
        return logs[0]
    sums: dict = {}
    counts: dict = {}
    for entry in logs:
        for key, value in entry.items():
            sums[key] = sums[key] + value if key in sums else value
            counts[key] = counts.get(key, 0) + 1
    return {key: value / counts[key] for key, value in sums.items()}


def unwrap(module: nn.Module) -> nn.Module:
    """The network inside a DistributedDataParallel wrapper (the module itself otherwise)."""
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module


@contextmanager
def frozen(module: nn.Module):
    """Use a network without training it: yields the unwrapped network with requires_grad off.

    A GAN's generator step runs the discriminator this way, so D's parameters collect no
    gradients and D's DDP wrapper (whose gradient hooks expect every parameter) is bypassed.
    """
    network = unwrap(module)
    flags = [(p, p.requires_grad) for p in network.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield network
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)

"""The contract between the engine and what a training step means.

A Task is an nn.Module holding its networks (and losses). The engine calls only:

    train_step(batch, optim) -> dict of detached scalar tensors to log (`loss`, `loss_ce`, ...)
    val_step(batch)          -> outputs that the run's metrics read (e.g. pred, target)
    visualize(batch, outputs, max_images) -> {tag: 3xHxW float image in [0, 1]} for TensorBoard
    save_visuals(batch, outputs, folder)  -> writes viewable images (tools/test.py --show-dir)
    networks()               -> {name: module} trained by the optimizers (each DDP-wrapped apart)
    required_optimizers      names the task passes to optim.step (checked when optimizers are built)

A task never calls backward, zero_grad or an optimizer's step: `optim.step(loss, name)` does.
"""

from __future__ import annotations

from contextlib import contextmanager

from torch import nn


class Task(nn.Module):
    required_optimizers: tuple[str, ...] = ()

    def train_step(self, batch: dict, optim) -> dict:
        raise NotImplementedError

    def val_step(self, batch: dict) -> dict:
        raise NotImplementedError

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        return {}

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        pass

    def networks(self) -> dict[str, nn.Module]:
        """Submodules with trainable parameters (an EMA copy or a loss has none)."""
        return {name: module for name, module in self.named_children()
                if any(p.requires_grad for p in module.parameters())}


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

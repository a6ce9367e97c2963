"""The contract between the engine and what a training step means.

A Task is an nn.Module holding its networks (and losses). The engine calls only:

    train_step(batch, optim) -> dict of detached scalar tensors to log (`loss`, `loss_ce`, ...)
    val_step(batch)          -> outputs that the run's metrics read (e.g. pred, target)
    visualize(batch, outputs, max_images) -> {tag: 3xHxW float image in [0, 1]} for TensorBoard
    save_visuals(batch, outputs, folder)  -> writes viewable images (tools/test.py --show-dir)
    networks()               -> {name: module} trained by the optimizers (each DDP-wrapped apart)

A task never calls backward, zero_grad or an optimizer's step: `optim.step(loss, name)` does.
"""

from __future__ import annotations

from torch import nn


class Task(nn.Module):
    def train_step(self, batch: dict, optim) -> dict:
        raise NotImplementedError

    def val_step(self, batch: dict) -> dict:
        raise NotImplementedError

    def visualize(self, batch: dict, outputs: dict, max_images: int) -> dict:
        return {}

    def save_visuals(self, batch: dict, outputs: dict, folder) -> None:
        pass

    def networks(self) -> dict[str, nn.Module]:
        return {name: module for name, module in self.named_children() if any(p.requires_grad for p in module.parameters())}

"""One pass over an evaluation loader: the task predicts, metrics accumulate on the device,
states are summed across ranks, and values reach the host once, in `compute()`.
Shared by training (EvalHook) and tools/test.py so both report the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from framework.dist import all_reduce_sum_, unwrapped_networks


def move_to_device(batch, device: torch.device):
    """Tensors of a (nested) batch to `device`, asynchronously when the memory is pinned."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: move_to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(v, device) for v in batch)
    return batch


@torch.no_grad()
def evaluate(task: nn.Module, loader, metrics: list, device: torch.device,
             on_batch: Callable[[int, dict, dict], None] | None = None) -> dict[str, float]:
    """Evaluate `task` on `loader`; `on_batch(i, batch, outputs)` sees every batch (e.g. to save images)."""
    was_training = task.training
    task.eval()
    for metric in metrics:
        metric.to(device)
        metric.reset()
    try:
        with unwrapped_networks(task):
            for i, batch in enumerate(loader):
                batch = move_to_device(batch, device)
                outputs = task.val_step(batch)
                for metric in metrics:
                    metric.update(outputs)
                if on_batch is not None:
                    on_batch(i, batch, outputs)
    finally:
        task.train(was_training)
    results: dict[str, float] = {}
    for metric in metrics:
        metric.sync(all_reduce_sum_)  # on every rank: a collective
        results.update(metric.compute())
    return results

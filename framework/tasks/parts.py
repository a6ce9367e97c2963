"""The small pieces the tasks share, below every task module so that none imports another for
them: the sum of loss terms, a network used without training it and the checkpointed step counter
(base.py and the GAN parts, adversary.py and ema.py), and running a forward pass again exactly as
it ran before (a GAN's accumulated G phase: gan.py, synthesis.py).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from framework.dist import unwrap


def total_loss(terms: dict[str, torch.Tensor]) -> torch.Tensor:
    """The sum of the loss terms (not `sum()`, whose start value 0 costs an addition per step)."""
    values = iter(terms.values())
    loss = next(values)
    for value in values:
        loss = loss + value
    return loss


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


class Counter(nn.Module):
    """A count that training reads and bumps every step as a python int (no device read per step)
    and that is checkpointed as an int64 buffer `count`, written when saved and read back when loaded:
    the one way the GAN parts keep their step counts (D steps, EMA updates)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self._value = 0
        self.register_load_state_dict_post_hook(_read_count)

    @property
    def value(self) -> int:
        return self._value

    def increment(self) -> int:
        self._value += 1
        return self._value

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        self.count.fill_(self._value)  # the buffer follows the python count when saved, not per step
        super()._save_to_state_dict(destination, prefix, keep_vars)


def _read_count(counter: Counter, _) -> None:
    counter._value = int(counter.count)


def random_state(device: torch.device) -> tuple:
    """The generator state that the next random draw on `device` starts from."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


@contextmanager
def replaying(rng: tuple, network: nn.Module):
    """Run a forward again as it ran before: the same random draws (dropout), and the
    network's buffers (normalisation statistics) left as they were before the rerun."""
    cpu_state, cuda_state = rng
    devices = [torch.cuda.current_device()] if cuda_state is not None else []
    buffers = [buffer.clone() for buffer in network.buffers()]
    with torch.random.fork_rng(devices=devices):
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state)
        yield
    # Restored through `.data`, which leaves the buffers' autograd version counters alone: a
    # BatchNorm forward saves its running statistics for backward, and an in-place copy into them
    # made the G step's backward fail ("modified by an inplace operation", shipped synthesis configs
    # with train.accumulate=2). Each buffer gets back the value the rerun started from, so a backward
    # that reads one sees what the forward read (a training-mode BatchNorm's reads none of them).
    with torch.no_grad():
        for buffer, saved in zip(network.buffers(), buffers):
            buffer.data.copy_(saved)

"""Running a forward pass again exactly as it ran before (a GAN's accumulated G phase)."""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def random_state(device: torch.device) -> tuple:
    """The generator state that the next random draw on `device` starts from."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


@contextlib.contextmanager
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

"""Each trainable network in its own DDP wrapper, and the task without them for evaluation."""

from __future__ import annotations

import inspect
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from framework.dist.process_group import is_distributed


def unwrap(module: nn.Module) -> nn.Module:
    """The network inside a DistributedDataParallel wrapper (the module itself otherwise): the one
    place that knows DDP's `.module`, so no other package re-derives it."""
    return module.module if isinstance(module, DistributedDataParallel) else module


class NetworkDDP(DistributedDataParallel):
    """DDP whose state dict has no `module.` level, so checkpoints from 1 and N processes match.

    A parent's state_dict() calls each child's state_dict(); this one answers for the
    wrapped network. Loading goes through the parent's recursion into `module`, so a
    pre-hook puts the `module.` level back into incoming keys.
    """

    def __init__(self, module: nn.Module, **kwargs):
        super().__init__(module, **kwargs)
        self._register_load_state_dict_pre_hook(self._add_module_level)

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        return self.module.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    @staticmethod
    def _add_module_level(state_dict, prefix, *_):
        for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "module.")]:
            state_dict[prefix + "module." + key[len(prefix):]] = state_dict.pop(key)


def wrap_networks(task: nn.Module, device: torch.device, find_unused_parameters: bool = False,
                  broadcast_buffers: bool = True) -> list[NetworkDDP]:
    """Wrap each trainable network of the task in its own DDP (a GAN's G and D apart, so
    neither needs find_unused_parameters); returns the wrappers."""
    if not is_distributed():
        return []
    # torch 2.14 renamed broadcast_buffers to forward_sync_buffers; older releases know only the former.
    buffers_key = "forward_sync_buffers" if "forward_sync_buffers" in \
        inspect.signature(DistributedDataParallel.__init__).parameters else "broadcast_buffers"
    wrappers = []
    for name, network in task.networks().items():
        wrapper = NetworkDDP(network, device_ids=[device.index] if device.type == "cuda" else None,
                             find_unused_parameters=find_unused_parameters,
                             **{buffers_key: broadcast_buffers})
        setattr(task, name, wrapper)
        wrappers.append(wrapper)
    return wrappers


@contextmanager
def unwrapped_networks(task: nn.Module):
    """The task with its DDP wrappers taken off, for evaluation: a DDP forward broadcasts
    buffers (a collective), and evaluation shards need not have equal numbers of batches.
    Buffers (BatchNorm statistics) are made rank 0's first, as in the checkpoint, so every
    rank evaluates the same network."""
    wrapped = {name: child for name, child in task.named_children() if isinstance(child, DistributedDataParallel)}
    for name, wrapper in wrapped.items():
        for buffer in wrapper.module.buffers():
            dist.broadcast(buffer, src=0)
        setattr(task, name, wrapper.module)
    try:
        yield task
    finally:
        for name, wrapper in wrapped.items():
            setattr(task, name, wrapper)

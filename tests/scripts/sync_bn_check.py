"""Run under torchrun (2 processes): a small BN network with CPUSyncBatchNorm, each rank on half
of a fixed batch; writes outputs, running statistics and gradients to <out>/rank<r>.pt."""

import gc
import sys

import torch
import torch.distributed as dist
from torch import nn

from framework.dist import NetworkDDP
from framework.dist.sync_bn import convert_sync_batchnorm


def network() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4))


def full_batch() -> torch.Tensor:
    return torch.randn(8, 3, 10, 10, generator=torch.Generator().manual_seed(1)) * 3 + 1


def loss_weights() -> torch.Tensor:
    """Per-output weights of the loss, so gradients differ from element to element."""
    return torch.linspace(-1, 2, 8 * 4 * 10 * 10).view(8, 4, 10, 10)


def run(model: nn.Module, x: torch.Tensor, weights: torch.Tensor) -> dict:
    x = x.clone().requires_grad_(True)
    y = model(x)
    (y * weights).mean().backward()
    inner = getattr(model, "module", model)
    return {"y": y.detach(), "x_grad": x.grad,
            "grads": {n: p.grad for n, p in inner.named_parameters()},
            "buffers": {n: b.clone() for n, b in inner.named_buffers()}}


if __name__ == "__main__":
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = NetworkDDP(convert_sync_batchnorm(network(), torch.device("cpu")))
    half, weights = full_batch().chunk(world)[rank], loss_weights().chunk(world)[rank]
    torch.save(run(model, half, weights), f"{out}/rank{rank}.pt")
    # DDP holds the process group: free it first, so the group is torn down now and not during
    # interpreter shutdown, where gloo's teardown aborted the process in ~3% of runs here.
    del model
    gc.collect()
    dist.destroy_process_group()

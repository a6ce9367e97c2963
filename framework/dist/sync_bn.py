"""Synchronized BatchNorm: batch statistics over every process of the group.

On CUDA this is torch.nn.SyncBatchNorm. torch's version refuses CPU tensors, so on CPU
(gloo) `CPUSyncBatchNorm` does the same arithmetic with all_reduce: forward sums
(sum x, sum x^2, count) over ranks; backward sums (sum dy, sum dy*x_hat) over ranks, so
inputs get the gradient of the full-batch BatchNorm. Weight and bias gradients stay
local, because DDP averages them like every other parameter's.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn

from framework.dist.process_group import get_world_size, is_distributed

logger = logging.getLogger("framework")


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        channels = x.shape[1]
        dims = [d for d in range(x.dim()) if d != 1]
        x32 = x.float()
        local_count = x.numel() // channels
        stats = torch.cat([x32.sum(dims), (x32 * x32).sum(dims),
                           torch.full((1,), float(local_count), device=x.device)])
        dist.all_reduce(stats)
        count = stats[-1]
        mean = stats[:channels] / count
        var = stats[channels:2 * channels] / count - mean * mean  # biased, as BatchNorm normalises
        invstd = torch.rsqrt(var.clamp_min(0) + eps)
        if running_mean is not None:
            unbiased = var * count / (count - 1).clamp_min(1)
            running_mean.mul_(1 - momentum).add_(momentum * mean)
            running_var.mul_(1 - momentum).add_(momentum * unbiased)
        shape = [1, channels] + [1] * (x.dim() - 2)
        x_hat = (x32 - mean.view(shape)) * invstd.view(shape)
        ctx.save_for_backward(x_hat, weight, invstd, count)
        ctx.dims = dims
        y = x_hat * weight.view(shape) + bias.view(shape) if weight is not None else x_hat
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        x_hat, weight, invstd, count = ctx.saved_tensors
        dims = ctx.dims
        channels = x_hat.shape[1]
        shape = [1, channels] + [1] * (x_hat.dim() - 2)
        dy = grad_y.float()
        local_sum_dy = dy.sum(dims)
        local_sum_dy_xhat = (dy * x_hat).sum(dims)
        sums = torch.cat([local_sum_dy, local_sum_dy_xhat])
        dist.all_reduce(sums)
        mean_dy = sums[:channels] / count
        mean_dy_xhat = sums[channels:] / count
        scale = invstd * (weight if weight is not None else 1.0)
        grad_x = (dy - mean_dy.view(shape) - x_hat * mean_dy_xhat.view(shape)) * scale.view(shape)
        grad_weight = local_sum_dy_xhat if weight is not None else None
        grad_bias = local_sum_dy if weight is not None else None
        return grad_x.to(grad_y.dtype), grad_weight, grad_bias, None, None, None, None


class CPUSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose training statistics span all processes (gloo; any input rank >= 2)."""

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input, got {x.dim()}D")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and is_distributed() and get_world_size() > 1):
            return super().forward(x)
        if self.momentum is None:
            raise ValueError("CPUSyncBatchNorm needs a momentum (cumulative averaging is not supported)")
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        running = (self.running_mean, self.running_var) if self.track_running_stats else (None, None)
        return _SyncBatchNormFunction.apply(x, self.weight, self.bias, *running, self.eps, self.momentum)


def _convert_to_cpu_sync(module: nn.Module) -> nn.Module:
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, CPUSyncBatchNorm):
        converted = CPUSyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                     module.track_running_stats)
        if module.affine:
            converted.weight = module.weight  # the same Parameter objects: optimizers stay valid
            converted.bias = module.bias
        if module.track_running_stats:
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        return converted
    for name, child in module.named_children():
        setattr(module, name, _convert_to_cpu_sync(child))
    return module


def convert_sync_batchnorm(network: nn.Module, device: torch.device) -> nn.Module:
    """BatchNorm layers -> synchronized ones (torch's on CUDA, ours on CPU); unchanged in one process."""
    if not is_distributed() or get_world_size() == 1:
        logger.info("sync_bn: a single process, keeping plain BatchNorm")
        return network
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(network)
    return _convert_to_cpu_sync(network)

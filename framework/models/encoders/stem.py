"""Adapting a pretrained first convolution to another number of input channels.

Lives with the models (pure tensor code); the loading path (framework/weights/stem_adapt.py)
applies it to shape-mismatched stems and reports them as adapted.
"""

from __future__ import annotations

import math

import torch

ADAPT_METHODS = ("zeros", "mean")


def adapt_input_channels(weight: torch.Tensor, in_channels: int, method: str) -> torch.Tensor:
    """A conv weight O x S x k x k (S source channels, 3 for RGB) turned into O x in_channels x k x k.

    * in_channels == 1: the sum of the source kernels, so a grey image x gives exactly what the
      source network gives for (x, x, x) (both methods; timm and smp do the same).
    * `zeros`: the source kernels kept for the first S channels, the extra channels' kernels 0,
      so the network starts exactly as the pretrained one whatever the extra channels hold.
      With fewer channels than the source (2 of 3), channel 0 gets the sum and the others 0.
    * `mean`: timm's `adapt_input_conv` (smp does the same): the source kernels repeated over
      the channels and every kernel scaled by S / in_channels, so the output keeps its scale
      when all channels carry similar signals.
    """
    if method not in ADAPT_METHODS:
        raise ValueError(f"unknown channel adaptation {method!r}; choose one of {', '.join(ADAPT_METHODS)}")
    out_channels, source, *kernel = weight.shape
    summed = weight.sum(dim=1, keepdim=True)
    if in_channels == 1:
        return summed
    if method == "mean":
        repeats = math.ceil(in_channels / source)
        return weight.repeat(1, repeats, 1, 1)[:, :in_channels] * (source / in_channels)
    adapted = weight.new_zeros(out_channels, in_channels, *kernel)
    if in_channels < source:
        adapted[:, :1] = summed
    else:
        adapted[:, :source] = weight
    return adapted

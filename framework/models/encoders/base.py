"""The encoder contract and the `ENCODERS` registry.

An encoder maps an N x in_channels x H x W batch to a list of feature maps, shallow to deep,
and says what they are: `channels[i]` and `strides[i]` (H / height of map i). Decoders
(framework/models/decoders/) are written against these three attributes only, so any
encoder works with any decoder. Add one with a decorator on a factory:

    from framework.models.encoders import ENCODERS, Encoder

    @ENCODERS.register()                       # `encoder: my_net` in a config
    def my_net(in_channels: int = 3, output_stride: int = 32) -> Encoder:
        ...

A factory that also takes `depth` (the number of maps to return, shallowest first; the
decoders' `encoder_depth`) lets a config drop the deepest stages, as the torchvision ones do.

`weights_prefix` is where a weights file's keys start inside the encoder (`body.` for
torchvision models, `model.` for timm ones, whose file layouts are kept), and
`torchvision_name` / `timm_name` (or None) name the model whose weights file
`encoder_weights: torchvision` / `timm` resolves.

`encoder: timm:<name>` builds any timm model (optional extra; timm_encoders.py) without a
registration.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from framework.registry import Registry

ENCODERS = Registry("encoders")


class Encoder(nn.Module):
    channels: list[int]
    strides: list[int]
    in_channels: int = 3
    weights_prefix: str = ""
    torchvision_name: str | None = None
    timm_name: str | None = None

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:  # pragma: no cover - interface
        raise NotImplementedError


def check_depth(depth, maps: int, name: str) -> None:
    """`encoder_depth` (None, or how many of the encoder's `maps` to keep) is valid for encoder `name`."""
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= maps):
        raise ValueError(f"encoder_depth must be an integer from 1 to {maps} for {name}, got {depth!r}")


def build_encoder(name: str, in_channels: int = 3, output_stride: int = 32, depth: int | None = None) -> Encoder:
    """The registered encoder `name` (or timm's, `timm:<name>`); a ValueError (a config error at
    the node) when unknown."""
    if name.startswith("timm:"):
        from framework.models.encoders.timm_encoders import TimmEncoder  # timm only when asked for

        return TimmEncoder(name[len("timm:"):], in_channels, output_stride, depth)
    if name not in ENCODERS:
        from framework.registry import did_you_mean

        raise ValueError(f"unknown encoder {name!r}{did_you_mean(name, ENCODERS.names())} "
                         f"(registered: {', '.join(ENCODERS.names())}; or timm:<name> with the timm extra)")
    factory = ENCODERS.get(name)
    if depth is None:
        return factory(in_channels=in_channels, output_stride=output_stride)
    if "depth" not in inspect.signature(factory).parameters:
        raise ValueError(f"encoder_depth: the encoder {name!r} returns all its maps (its factory takes no `depth`)")
    return factory(in_channels=in_channels, output_stride=output_stride, depth=depth)

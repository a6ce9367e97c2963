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

A family of encoders named by a prefix, `<family>:<name>` (`timm:resnet18`, timm_encoders.py),
registers one builder with `register_family` where it is defined; this module knows no family.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import nn

from framework.registry import Registry, did_you_mean

ENCODERS = Registry("encoders")

# `<prefix>:<name>` encoders: prefix -> builder(name, in_channels, output_stride, depth).
ENCODER_FAMILIES: dict[str, Callable[..., Encoder]] = {}


def register_family(prefix: str, builder: Callable[..., Encoder]) -> None:
    """Let `encoder: <prefix>:<name>` build `builder(name, in_channels, output_stride, depth)`."""
    if prefix in ENCODER_FAMILIES:
        raise KeyError(f"encoder family {prefix!r} is already registered")
    ENCODER_FAMILIES[prefix] = builder


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
    """The registered encoder `name` (or a family's, `<family>:<name>`); a ValueError (a config
    error at the node) when unknown."""
    family, colon, member = name.partition(":")
    if colon:
        if family not in ENCODER_FAMILIES:
            raise ValueError(f"unknown encoder family {family!r} in {name!r}{did_you_mean(family, list(ENCODER_FAMILIES))} "
                             f"(families: {', '.join(sorted(ENCODER_FAMILIES))})")
        return ENCODER_FAMILIES[family](member, in_channels, output_stride, depth)
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}{did_you_mean(name, ENCODERS.names())} "
                         f"(registered: {', '.join(ENCODERS.names())}; or timm:<name> with the timm extra)")
    factory = ENCODERS.get(name)
    if depth is None:
        return factory(in_channels=in_channels, output_stride=output_stride)
    if "depth" not in inspect.signature(factory).parameters:
        raise ValueError(f"encoder_depth: the encoder {name!r} returns all its maps (its factory takes no `depth`)")
    return factory(in_channels=in_channels, output_stride=output_stride, depth=depth)

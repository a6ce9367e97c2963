"""Which optimizers run torch's fused kernel: `fused: true` by default where torch has one, except
SGD with momentum under float16's GradScaler.

The fused kernel does the whole update in one pass: an AdamW step over EncoderUNet-resnet18's
14.3M parameters takes 7 ms instead of 34 on 2 CPU cores (benchmarks/studies/fused_optim.py).

A GradScaler hands a fused optimizer its overflow flag instead of skipping the step itself.
torch's fused SGD then allocates its momentum buffers (`torch.empty_like`) at a skipped first
step and leaves them unwritten, and the next step reads whatever that memory holds as the
momentum (torch 2.14: a float16 SemanticSynthesisTask run with SGD momentum had a discriminator
weight of 7.7e35 after its first step that was not skipped). float16's scale starts at 2**16,
so a first step that overflows is common. Fused Adam, AdamW and Adagrad skip such a step as
the default loop does (tests/test_amp.py). So under float16, SGD with momentum keeps torch's
default loop, and `fused: true` there is refused.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from framework.errors import ConfigError
from framework.registry import OPTIMIZERS


def with_fused_default(node: dict, params: list[nn.Parameter], groups: list, path: str,
                       float16: bool = False) -> dict:
    """`fused: true` unless the entry chooses (`fused`, `foreach` or `differentiable`), for the
    optimizers that have a fused kernel (Adam, AdamW, SGD, Adagrad) when every parameter is a
    float tensor on the CPU or a CUDA device; not for SGD with momentum when `float16` (a
    GradScaler), where an explicit `fused: true` is refused. `fused: false` restores torch's
    default (`foreach`)."""
    cls = OPTIMIZERS.get(node["type"]) if isinstance(node.get("type"), str) and node["type"] in OPTIMIZERS else None
    unsafe = float16 and cls is not None and issubclass(cls, torch.optim.SGD) and has_momentum(node, groups)
    if unsafe and node.get("fused"):
        raise ConfigError(f"{path}.fused: torch's fused SGD with momentum leaves its momentum uninitialised when "
                          "float16's GradScaler skips its first step; set fused: false (or train in bfloat16)")
    if cls is None or unsafe or "fused" in node or "foreach" in node or node.get("differentiable"):
        return node
    if "fused" not in inspect.signature(cls.__init__).parameters:
        return node
    if not all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params):
        return node
    return {**node, "fused": True}


def has_momentum(node: dict, groups: list) -> bool:
    """Whether the entry or one of its parameter groups sets a non-zero momentum."""
    momenta = [node.get("momentum", 0)] + [g.get("momentum", 0) for g in groups if isinstance(g, dict)]
    return any(momenta)

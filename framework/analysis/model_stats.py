"""Parameters and FLOPs per module, FLOPs counted by torch's own FlopCounterMode (a
multiply-add counts 2 FLOPs; convolutions, matmuls and attention are counted, elementwise
ops are not, as in torch.utils.flop_counter)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def module_rows(network: nn.Module, inputs: tuple[torch.Tensor, ...], depth: int = 2) -> list[dict]:
    """[{module, params, trainable, flops}] for the network and its submodules up to `depth`
    levels down, in definition order; the first row is the whole network."""
    counter = FlopCounterMode(display=False, depth=None)
    with counter, torch.no_grad():
        network(*inputs)
    flops = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    root = type(network).__name__

    def module_flops(name: str, module: nn.Module) -> int:
        # A container that is never called itself (ModuleList) gets its children's FLOPs.
        key = f"{root}.{name}" if name else root
        if key in flops:
            return int(flops[key])
        return sum(module_flops(f"{name}.{child}" if name else child, sub) for child, sub in module.named_children())

    rows = []
    for name, module in network.named_modules():
        level = 0 if not name else name.count(".") + 1
        if level > depth:
            continue
        params = list(module.parameters())
        rows.append({"module": name or root, "params": sum(p.numel() for p in params),
                     "trainable": sum(p.numel() for p in params if p.requires_grad),
                     "flops": module_flops(name, module)})
    return rows


def human(number: float) -> str:
    """1234567 -> '1.23M'."""
    if number == 0:
        return "0"
    exponent = min(int(math.log10(abs(number)) // 3), 4)
    return f"{number / 1000**exponent:.2f}{['', 'K', 'M', 'G', 'T'][exponent]}" if exponent else str(int(number))

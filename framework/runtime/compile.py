"""`compile:` torch.compile of each trainable network, in place.

    compile: false                                   # the default
    compile: true                                    # torch.compile's defaults (inductor)
    compile: {backend: inductor, mode: max-autotune, dynamic: false, fullgraph: false, options: {...}}

`nn.Module.compile()` compiles a network's forward in place, so parameter names, checkpoints
and the task's attributes stay as they are (no `_orig_mod.` prefix) and DDP wraps the same
module. When it helps: long runs with fixed input sizes, on GPU above all (fused elementwise
ops, fewer kernel launches); the first iterations pay the compilation (tens of seconds on a
CPU, each new input shape or train/eval switch may recompile), so short CPU runs get slower.
The inductor backend on a CPU needs a C++ compiler: without a working one, the run stops at
start-up with one line (`check_cpu_compiler`), not at its first step with inductor's traceback.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from framework.errors import ConfigError
from framework.registry import reject_unknown_keys

COMPILE_KEYS = ("backend", "mode", "dynamic", "fullgraph", "options")


def compile_settings(setting) -> dict | None:
    """The keywords for `nn.Module.compile`, or None when compiling is off."""
    if setting is False or setting is None:
        return None
    if setting is True:
        return {}
    if not isinstance(setting, Mapping):
        raise ConfigError(f"compile: must be true, false or a mapping of {', '.join(COMPILE_KEYS)}, got {setting!r}")
    reject_unknown_keys(setting, COMPILE_KEYS, "compile")
    return dict(setting)


def check_cpu_compiler(kwargs: dict, device: torch.device) -> None:
    """inductor writes C++ for a CPU run and builds it at the first step; a missing compiler
    would end that step in a 99-line traceback (InvalidCxxCompiler), so it is looked for here."""
    if device.type != "cpu" or kwargs.get("backend", "inductor") != "inductor":
        return
    import torch._inductor.config as inductor_config  # imported only when compiling: seconds of import
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        tried = ", ".join(name for name in inductor_config.cpp.cxx if name)
        raise ConfigError(f"compile: the inductor backend builds C++ for a CPU run and found no working C++ "
                          f"compiler (tried {tried}); install g++ or clang++ (or set CXX to one), or set "
                          "compile: false") from None


def compile_networks(networks: Mapping[str, nn.Module], setting, device: torch.device) -> list[str]:
    """Compile each network in place per the `compile:` setting; the names compiled."""
    kwargs = compile_settings(setting)
    if kwargs is None:
        return []
    check_cpu_compiler(kwargs, device)
    for network in networks.values():
        network.compile(**kwargs)
    return list(networks)

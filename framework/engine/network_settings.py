"""What a model node may say besides its constructor's keywords, and applying it to the network.

    model: {type: UNet, num_classes: 4, init: {checkpoint: unet.pth}, frozen: [stem], norm_eval: true}

`init` (pretrained weights, loaded by framework/engine/pretrained.py), `frozen` (submodules
not trained and kept in eval mode) and `norm_eval` (every BatchNorm kept in eval mode). The
engine declares these keys to the models registry (`MODELS.allow_keys`), which strips them
from the node and hands them back with the built network, so lower layers know nothing of them.
"""

from __future__ import annotations

import types

from torch import nn

from framework.errors import ConfigError
from framework.registry import MODELS, did_you_mean

# Keys a model node may carry besides its constructor's keywords: what the engine does with
# the network once built (pretrained weights, frozen submodules, BatchNorm kept in eval mode).
NETWORK_SETTING_KEYS = ("init", "frozen", "norm_eval")


def _record_settings(network: nn.Module, settings: dict, path: str) -> None:
    network.network_settings = {**settings, "path": path}  # applied by build.py's networks stage


MODELS.allow_keys(NETWORK_SETTING_KEYS, _record_settings)


def configured_networks(task: nn.Module) -> list[tuple[str, nn.Module, dict]]:
    """(name in the task, network, settings) of every network whose node had init/frozen/norm_eval."""
    return [(name, module, module.network_settings) for name, module in task.named_modules()
            if getattr(module, "network_settings", None)]


def freeze_and_keep_eval(network: nn.Module, settings: dict) -> None:
    """Apply `frozen` and `norm_eval`: no gradients for frozen submodules, and frozen submodules
    and (with norm_eval) every BatchNorm kept in eval mode whenever the network is trained."""
    path = settings["path"]
    frozen = settings.get("frozen") or []
    if frozen is True:
        frozen = [""]
    elif isinstance(frozen, str) or not isinstance(frozen, list):
        raise ConfigError(f"{path}.frozen: expected a list of submodule names (or true), got {frozen!r}")
    names = dict(network.named_modules())
    for name in frozen:
        if name not in names:
            hint = did_you_mean(str(name), [n for n in names if n])
            raise ConfigError(f"{path}.frozen: the network has no submodule '{name}'{hint}")
        for p in names[name].parameters():
            p.requires_grad_(False)
    norm_eval = settings.get("norm_eval", False)
    if not isinstance(norm_eval, bool):
        raise ConfigError(f"{path}.norm_eval: expected true or false, got {norm_eval!r}")
    if frozen or norm_eval:
        network._kept_in_eval = (list(frozen), norm_eval)
        # Bound to the network (not a closure over it), so deep copies (EMA) keep their own.
        network.train = types.MethodType(_train_keeping_eval, network)
        network.train(network.training)


def _train_keeping_eval(network: nn.Module, mode: bool = True) -> nn.Module:
    type(network).train(network, mode)
    frozen, norm_eval = network._kept_in_eval
    # Looked up by name at every call, so BatchNorms converted to SyncBatchNorm are covered.
    kept = [network.get_submodule(name) for name in frozen]
    if norm_eval:
        kept += [m for m in network.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for module in kept:
        type(module).train(module, False)  # not module.eval(): that would call this again
    return network

"""`encoder_weights` of encoder-decoder models: which file, and how its names map.

    encoder_weights: torchvision     # the file torchvision would download, from the local hub cache
    encoder_weights: torchvision:IMAGENET1K_V1   # another of torchvision's weights of the encoder, by tag
    encoder_weights: timm            # (encoder: timm:<name>) the file timm would download, from the local cache
    encoder_weights: resnet34.pth    # a local .pth / .safetensors (torchvision or timm layout)

`torchvision` resolves the encoder's torchvision weights enum (its DEFAULT entry) to the file
name torchvision downloads and looks for it in `$TORCH_HOME/hub/checkpoints` (torch.hub's
cache); nothing is downloaded: a missing file is an error naming the file and the folder.
`timm` does the same for a timm encoder with the model's pretrained config (its default tag,
or the one in the name): the Hugging Face hub cache (`$HF_HUB_CACHE`) for a hub file, the
torch hub cache for a plain URL.

A file's keys may carry any prefix (`backbone.`, `encoder.`, `module.model.backbone.`, ...):
the prefix under which most keys are encoder names is used, the rest is reported as outside
the prefix. The load itself is framework/engine/pretrained.py's `load_into` on the whole
network (so the report lists the decoder and head as missing: new), with the model's
`adapt_in_channels` (framework/weights/stem_adapt.py) for a stem of another channel count.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import torch
from torch import nn

from framework.errors import CheckpointError, ConfigError
from framework.weights.partial_load import LoadSpec, _without_wrappers, weights_in_file

logger = logging.getLogger("framework")


def networks_with_encoder_weights(task: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name in the task, network) of every encoder-decoder model asking for encoder weights."""
    return [(name, module) for name, module in task.named_modules()
            if getattr(module, "encoder_weights", None) and hasattr(module, "encoder")]


def torchvision_weights_file(model_name: str, where: str, tag: str = "DEFAULT") -> str:
    """The hub-cache file torchvision would download for `model_name`'s weights `tag` (DEFAULT, or
    an entry of its weights enum such as IMAGENET1K_V1: the file of torchvision < 0.13 and of
    mmseg's torchvision://resnet50, where DEFAULT is IMAGENET1K_V2 for the ResNets)."""
    import torchvision

    try:
        enum = torchvision.models.get_model_weights(model_name)
    except ValueError as err:
        raise ConfigError(f"{where}: torchvision has no weights for '{model_name}' ({err})") from err
    if tag not in enum.__members__:
        raise ConfigError(f"{where}: torchvision has no weights {tag!r} for '{model_name}' "
                          f"(its tags: {', '.join(enum.__members__)})")
    weights = enum[tag]
    file_name = os.path.basename(urlparse(weights.url).path)
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    if not (folder / file_name).is_file():
        raise CheckpointError(f"{where}: torchvision weights {weights} need the file {file_name} in {folder} "
                              f"(nothing is downloaded at run time; fetch {weights.url} there, or set TORCH_HOME)")
    return str(folder / file_name)


def timm_weights_file(model_name: str, where: str) -> str:
    """The cached file timm would download for `model_name` (`resnet18` or `resnet18.a1_in1k`)."""
    from framework.models.encoders.timm_encoders import import_timm

    timm = import_timm(f"{where}: timm")
    config = timm.models.get_pretrained_cfg(model_name)  # the encoder's build has checked the tag
    if config is None or not (config.hf_hub_id or config.url):
        raise ConfigError(f"{where}: timm has no pretrained weights for '{model_name}'")
    if config.hf_hub_id:
        from huggingface_hub import constants, try_to_load_from_cache

        names = [config.hf_hub_filename] if config.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]
        for name in names:
            cached = try_to_load_from_cache(config.hf_hub_id, name)
            if isinstance(cached, str):
                return cached
        raise CheckpointError(f"{where}: timm weights of {model_name} need {names[0]} of the Hugging Face repo "
                              f"{config.hf_hub_id} in the cache {constants.HF_HUB_CACHE} (nothing is downloaded "
                              f"at run time; python -c \"import timm; timm.create_model('{model_name}', "
                              f"pretrained=True)\" fills it on a machine with internet, or give the file as "
                              "encoder_weights: PATH)")
    file_name = os.path.basename(urlparse(config.url).path)
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    if not (folder / file_name).is_file():
        raise CheckpointError(f"{where}: timm weights of {model_name} need the file {file_name} in {folder} "
                              f"(nothing is downloaded at run time; fetch {config.url} there, or give the file as "
                              "encoder_weights: PATH)")
    return str(folder / file_name)


def encoder_prefix(file_keys, encoder_keys: set[str], where: str) -> str:
    """The key prefix of the file under which most keys are the encoder's (torchvision) names."""
    prefixes: Counter[str] = Counter()
    for key in file_keys:
        parts = _without_wrappers(key).split(".")
        for start in range(len(parts)):
            if ".".join(parts[start:]) in encoder_keys:
                prefixes[".".join(parts[:start]) + "." if start else ""] += 1
                break
    if not prefixes:
        example = ", ".join(list(encoder_keys)[:3])
        raise CheckpointError(f"{where}: no tensor name of the file ends with one of the encoder's "
                              f"(such as {example}); is it weights for this encoder?")
    return prefixes.most_common(1)[0][0]


ENCODER_MIN_LOADED_RATIO = 0.9  # of the encoder's tensors (BatchNorm counters aside)


def encoder_load_spec(network: nn.Module, path_in_task: str) -> LoadSpec:
    """The LoadSpec loading `network.encoder_weights` into `network.encoder`."""
    where = f"{path_in_task}.encoder_weights"
    encoder = network.encoder
    source = network.encoder_weights
    if source == "torchvision" or source.startswith("torchvision:"):
        if not encoder.torchvision_name:
            raise ConfigError(f"{where}: torchvision: the encoder {type(encoder).__name__} is not a torchvision model")
        source = torchvision_weights_file(encoder.torchvision_name, where, source.partition(":")[2] or "DEFAULT")
    elif source == "timm":
        if not encoder.timm_name:
            raise ConfigError(f"{where}: timm: the encoder {type(encoder).__name__} is not a timm model "
                              "(use encoder: timm:<name>)")
        source = timm_weights_file(encoder.timm_name, where)
    elif not os.path.isfile(source):
        raise CheckpointError(f"{where}: file not found: {source}")
    inside = encoder.weights_prefix
    own = {k[len(inside):] for k in encoder.state_dict() if k.startswith(inside)}
    prefix = encoder_prefix(weights_in_file(source), own, where)
    # The encoder is the part being loaded: every tensor of it of another shape is an error
    # (the stem adapted when adapt_in_channels asks), and most of it must come from the file.
    return LoadSpec(checkpoint=source, prefix=prefix, rename={"^": f"encoder.{inside}"},
                    adapt_in_channels=network.adapt_in_channels, scope=f"encoder.{inside}",
                    min_loaded_ratio=ENCODER_MIN_LOADED_RATIO)


def encoder_summary(report, network: nn.Module) -> str:
    """One line: how much of the encoder the load covered, and how many tensors start new."""
    encoder_keys = [k for k in network.state_dict() if k.startswith("encoder.")]
    loaded = sum(e["key"].startswith("encoder.") for e in report.loaded)
    adapted = [e["key"] for e in report.loaded if e.get("adapted")]
    return (f"{report.target}: encoder {loaded}/{len(encoder_keys)} tensors loaded "
            f"({loaded / max(len(encoder_keys), 1):.0%})" + (f", {', '.join(adapted)} adapted" if adapted else "")
            + f"; decoder and head new ({report.module_tensors - len(encoder_keys)} tensors)")

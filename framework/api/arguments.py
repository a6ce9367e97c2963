"""What a trained model is given, checked by one set of rules: the Python API's arguments
(framework/api/__init__.py, model.py) and tools/infer.py's options are the same values under two
spellings (`seed` and `--seed`), refused in the same words (`seed: expected an integer >= 0 ...`).

The numeric rules are the config's (framework/config/rules.py); which options a kind of model
uses is file_runs.py's (`FileRun.refuse_unused`), run by `generate` with the API's spelling; the
pixel and label-map rules are in batches.py and `Model.check_labels`. One `ConfigError` line
naming the argument, before anything is computed or written.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from framework.config.rules import boolean, integer, number, shown
from framework.config.schema import SEED_MAX
from framework.errors import ConfigError
from framework.runtime.cli import MAX_BATCH, MAX_DRAWS, MAX_IMAGES, MAX_SCALE, MAX_SIDE, check_options

# the upper bounds are the tools' (runtime/cli.py): past them a value only exhausts memory or time
RULES = {"batch_size": integer(1, max=MAX_BATCH), "tile_batch": integer(1, max=MAX_BATCH),
         "crop": integer(1, max=MAX_SIDE), "stride": integer(1, max=MAX_SIDE),
         "scales": number(above=0, max=MAX_SCALE, finite=True), "num": integer(1, max=MAX_IMAGES),
         "samples": integer(1, max=MAX_DRAWS), "smoothgrad": integer(1, max=MAX_DRAWS),
         "seed": integer(0, max=SEED_MAX), "num_classes": integer(1), "amp": boolean, "probabilities": boolean,
         "overwrite": boolean}

# tools/infer.py's options by the API's argument names where they differ (file_runs.py's messages)
API_SPELLING = {"input": "conditions"}


def option(key: str) -> str:
    """The command-line spelling of an argument: tile_batch -> --tile-batch."""
    return "--" + key.replace("_", "-")


def checked(values: dict, spell=str) -> dict:
    """{key: value} (None: not given) checked by RULES, each named by `spell(key)`; {key: the
    value as kept} (an integral float becomes an int)."""
    kept = check_options({spell(key): (value, RULES[key]) for key, value in values.items()})
    return {key: kept[spell(key)] for key in values}


def type_name(value) -> str:
    """'an int', 'a numpy.ndarray': what a refusal says it got."""
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return ("an " if name[0] in "aeiou" else "a ") + name


def refuse_tensor(value, what: str) -> None:
    """Tensors are refused by type: whether one is C x H x W or H x W x C, 0..1 or 0..255, would be a guess."""
    if type(value).__module__.startswith("torch"):
        raise ConfigError(f"{what}: {type_name(value)}; give numpy arrays (H x W x C: "
                          "tensor.permute(1, 2, 0).cpu().numpy() for a C x H x W one), PIL images or file paths")


def path_argument(name: str, value, want: str = "file", optional: bool = False) -> Path | None:
    """`value` as a Path: a str or os.PathLike naming an existing file (want "file"), an existing
    folder ("folder"), anything but an existing file ("new folder": a folder to write into), or
    anything ("any")."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)) or str(value) == "":
        raise ConfigError(f"{name}: expected a path, got {shown(value)} ({type_name(value)})")
    path = Path(value)
    if want == "any":  # a file, a folder or a name (load's Hub name): the caller looks
        return path
    if want == "new folder":
        if path.is_file():
            raise ConfigError(f"{name}: {path} is a file; give a folder")
        return path
    if not path.exists():
        raise ConfigError(f"{name}: {path}: no such {want}")
    if want == "file" and path.is_dir():
        raise ConfigError(f"{name}: {path} is a folder; give a file")
    if want == "folder" and not path.is_dir():
        raise ConfigError(f"{name}: {path} is a file; give a folder")
    return path


def overrides_argument(overrides) -> list[str]:
    """`key=value` strings: a list or tuple of them (one string alone would be read letter by letter)."""
    if overrides is None:
        return []
    if not isinstance(overrides, (list, tuple)) or not all(isinstance(item, str) for item in overrides):
        raise ConfigError(f"overrides: expected a list of 'key=value' strings, got {shown(overrides)}")
    return list(overrides)


def resume_argument(resume):
    """None/False (start, or auto_resume), True (the latest checkpoint) or a checkpoint file."""
    if resume is None or isinstance(resume, bool):
        return resume
    return str(path_argument("resume", resume))


def names_argument(names, count: int, inputs: str = "label map") -> list[str] | None:
    """One string per input (what keys its noise), or None."""
    if names is None:
        return None
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"names: expected a list of strings (one per {inputs}), got {shown(names)}")
    if len(names) != count:
        raise ConfigError(f"names: {len(names)} given for {count} {inputs}(s); give one per {inputs}")
    return list(names)


def noise_argument(noise, shape: tuple[int, ...], count: int | None):
    """Floating-point noise of shape (count, *shape) (count None: any number >= 1), as a tensor."""
    import torch

    if isinstance(noise, np.ndarray):
        noise = torch.from_numpy(noise)
    if not isinstance(noise, torch.Tensor) or not noise.is_floating_point():
        raise ConfigError(f"noise: expected a floating-point array or tensor, got {type_name(noise)}"
                          + (f" of {noise.dtype}" if hasattr(noise, "dtype") else ""))
    expected = ("N" if count is None else str(count), *map(str, shape))
    if noise.dim() != len(expected) or tuple(noise.shape[1:]) != shape or noise.shape[0] < 1 or (
            count is not None and noise.shape[0] != count):
        raise ConfigError(f"noise: expected shape {' x '.join(expected)}, got {tuple(noise.shape)}")
    if not torch.isfinite(noise).all():
        raise ConfigError("noise: holds NaN or infinite values")
    return noise.float()


def generate_arguments(model, kind: str, given: dict, count: int | None, refuse_unused) -> dict:
    """generate()'s arguments checked: the numbers by RULES, the options this kind of model does
    not use refused by `refuse_unused(options, spelling)` (file_runs.py's, as tools/infer.py refuses
    them: passed in, as file_runs.py sits above this module), noise and names fitted to `count`
    inputs. {"seed", "num", "samples", "noise", "names"} as used."""
    values = checked({key: given[key] for key in ("seed", "num", "samples", "batch_size", "amp")})
    options = {**values, "direction": given["direction"], "input": True if count is not None else None}
    refuse_unused(options, API_SPELLING)  # num/seed/samples where this kind ignores them
    noise, names = given["noise"], given["names"]
    name = type(model.task).__name__
    if names is not None and kind != "labels":
        raise ConfigError(f"names: {name} takes no label maps; names key the noise of semantic synthesis")
    if noise is not None:
        if kind in ("image", "unpaired") or model.task.noise_shape is None:
            raise ConfigError(f"noise: {name}'s generator takes no noise")
        if kind == "noise" and (values["num"] is not None or values["seed"] is not None):
            raise ConfigError("num, seed: give them or noise, not both (noise fixes the images)")
        if kind == "labels" and names is not None:
            raise ConfigError("names: key each map's noise; with noise given they would change nothing")
        if (values["samples"] or 1) > 1:
            raise ConfigError("samples: each draw would use the given noise, the same image each time")
        noise = noise_argument(noise, tuple(model.task.noise_shape), count)
    return {"seed": 0 if values["seed"] is None else values["seed"], "num": values["num"],
            "samples": values["samples"] or 1, "noise": noise,
            "names": names_argument(names, count) if kind == "labels" else None,
            "batch_size": values["batch_size"], "amp": values["amp"]}

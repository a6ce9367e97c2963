"""YAML configs: `_base_` inheritance, `${...}` interpolation, `key=value` overrides, validation.

    cfg = load_config("configs/segmentation/unet_shapes.yaml", ["optim.lr=0.01", "load_from=null"])

Rules a user can rely on:
- `_base_: [a.yaml, b.yaml]` (paths relative to the file) are merged in order, then the file
  itself; the later one wins key by key. A node whose `type` differs from the base's `type`
  replaces the base node instead of merging into it, so switching `UNet` for `DeepLabV3`
  never drags UNet's keywords along.
- Overrides `a.b.c=value` are parsed as YAML (`[1, 2]`, `null`, `1e-3`), applied in order
  (a repeated key: the last wins), and must name an existing key; `+a.b.c=value` adds a new one.
- Every public key has a default (`DEFAULTS`) and a type and range (`SCHEMA`), checked before
  anything is built: unknown keys and wrong values are all reported at once, one line each.
- No number anywhere in the config (component keywords too) may be NaN or infinite, except
  infinity where a key gives it a meaning (`INFINITY_ALLOWED` in rules.py: clip_grad.norm_type).
- A base node replaced because its `type` changed: the keys it dropped are reported (`notes`).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from framework.config.custom_imports import import_custom_modules, locate  # noqa: F401  (part of this module's API)
from framework.config.files import load_with_bases, merge_nodes, parse_yaml
from framework.config.metric_direction import metric_direction
from framework.config.rules import nonfinite_numbers
from framework.config.schema import AUTO_WITH_FLOAT16, DEFAULTS, LOAD_SPEC, SCHEMA
from framework.errors import ConfigError
from framework.registry import did_you_mean, to_plain  # noqa: F401 (to_plain: part of this module's API)

# ----------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[str, Any, bool]:
    """`a.b=1` -> ("a.b", 1, False); `+a.b=1` -> ("a.b", 1, True). Values are parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    adds = key.startswith("+")
    key = key.lstrip("+")
    if not key:
        raise ConfigError(f"override '{text}' has no key")
    try:
        value = parse_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # not YAML: take it as a plain string
    return key, value, adds


def _split_key(key: str) -> list[str | int]:
    """'hooks.-1.type' -> ['hooks', -1, 'type']: numbers (negative ones count from the end) index lists."""
    return [int(p) if p.removeprefix("-").isdigit() else p for p in key.split(".")]


def apply_override(cfg: dict, key: str, value: Any, adds: bool = False) -> None:
    """Set `key` (dotted, list indices as numbers) in the plain dict `cfg`."""
    parts = _split_key(key)
    node: Any = cfg
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        here = ".".join(str(p) for p in parts[: depth + 1])
        if isinstance(node, list):
            if not isinstance(part, int) or not -len(node) <= part < len(node):
                raise ConfigError(f"override '{key}': {here} is not an index of a list of {len(node)}")
        elif isinstance(node, dict):
            if part not in node:
                if adds and last:
                    node[part] = value
                    return
                if adds:
                    node[part] = {}
                else:
                    hint = did_you_mean(str(part), [str(k) for k in node])
                    raise ConfigError(
                        f"override '{key}': no key '{here}' in the config{hint} "
                        f"(use +{key}=... to add a new key)"
                    )
        else:
            raise ConfigError(f"override '{key}': {'.'.join(map(str, parts[:depth]))} is a value, not a section")
        if last:
            node[part] = value
        else:
            node = node[part]


# ----------------------------------------------------------------------------- validation


def check_config(cfg: dict, source: str, notes: list[str] | None = None) -> dict:
    """The config with values normalised by SCHEMA (`1e4` iterations -> 10000) and `auto`
    settings resolved (`train.best_mode`, said in `notes`); raises one ConfigError listing every
    mistake, one line each, when there is any."""
    errors: list[str] = []
    checked = SCHEMA(cfg, "", errors)
    already = {line.split(":", 1)[0] for line in errors}  # a ranged key's own rule said it (lr: nan)
    errors += [line for line in nonfinite_numbers(cfg) if line.split(":", 1)[0] not in already]
    if isinstance(checked.get("load_from"), dict):
        checked["load_from"] = LOAD_SPEC(checked["load_from"], "load_from", errors)
    train = checked.get("train") if isinstance(checked.get("train"), dict) else {}
    if train.get("max_iters") is None and train.get("max_epochs") is None:
        errors.append("train.max_iters: missing (set train.max_iters or train.max_epochs)")
    elif train.get("max_iters") is not None and train.get("max_epochs") is not None:
        errors.append(f"train.max_iters ({train['max_iters']}) and train.max_epochs ({train['max_epochs']}) "
                      "are both set: give one (null the other)")
    if train.get("best_mode") == "auto":
        train["best_mode"] = resolve_best_mode(train.get("best_metric"), errors, notes)
    amp = checked.get("amp") if isinstance(checked.get("amp"), dict) else {}
    if amp.get("enabled") == "auto" and amp.get("dtype") == "float16":
        errors.append(AUTO_WITH_FLOAT16)  # auto picks the dtype: an explicit float16 would be dropped silently
    if checked.get("optim") is not None and checked.get("optimizers") is not None:
        errors.append("optim/optimizers: give either 'optim' (one optimizer) or 'optimizers' (by name), not both")
    if errors:
        raise ConfigError("\n".join(f"{source}: {line}" for line in errors))
    return checked


def resolve_best_mode(best_metric, errors: list[str], notes: list[str] | None) -> str:
    """`train.best_mode: auto`: max or min from the name of train.best_metric (metric_direction.py)."""
    if not isinstance(best_metric, str):
        return "auto"  # no best checkpoint is kept: the mode is never read
    direction = metric_direction(best_metric)
    if direction is None:
        errors.append(f"train.best_mode: auto, and the name '{best_metric}' (train.best_metric) does not say whether a "
                      "greater or a smaller value is better: set train.best_mode: max or min")
        return "auto"
    mode = "max" if direction == "greater" else "min"
    if notes is not None:
        better = "greater" if direction == "greater" else "smaller"
        notes.append(f"train.best_mode: {mode} for train.best_metric {best_metric} (auto: a {better} value is better)")
    return mode


def load_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = (),
                notes: list[str] | None = None) -> DictConfig:
    """Load, merge, override, resolve and validate a config file. `notes` (when given) receives
    what the merge did that a user may not expect (base keys dropped by a change of type)."""
    path = Path(path)
    merged = merge_nodes(copy.deepcopy(DEFAULTS), load_with_bases(path, notes=notes))
    for text in overrides:
        apply_override(merged, *parse_override(text))
    try:
        cfg = OmegaConf.create(merged)
        OmegaConf.resolve(cfg)  # ${...} interpolations, after overrides so they see new values
    except OmegaConfBaseException as err:
        first = str(err).splitlines()[0]
        raise ConfigError(f"{path}: {first}") from err
    cfg = OmegaConf.create(check_config(OmegaConf.to_container(cfg), str(path), notes))
    cfg._set_flag("allow_objects", False)
    return cfg


def save_config(cfg: DictConfig, path: str | os.PathLike) -> None:
    """Write the resolved config (what a run actually used) as YAML, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(OmegaConf.to_yaml(cfg, resolve=True), encoding="utf-8")
    os.replace(tmp, path)


def default_work_dir(config_path: str | os.PathLike) -> str:
    return os.path.join("work_dirs", Path(config_path).stem)

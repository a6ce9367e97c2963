"""A hyperparameter search space in YAML (tools/search.py), checked whole against the config:

    optim.lr: {log_uniform: [1.0e-4, 1.0e-2]}
    task.loss.weights.1: {uniform: [0, 1]}
    task.model.base_channels: {choice: [16, 32]}

Each key is a config key (dots into mappings and list items) that the config has; each value one
distribution. Every mistake is one ConfigError line naming the file and the key: a key the config
lacks, a range with low > high, log_uniform with low <= 0, an empty choice list, another kind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from framework.errors import ConfigError
from framework.registry import did_you_mean

KINDS = ("log_uniform", "uniform", "choice")
_MISSING = object()


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: {value!r} is not a finite number")
    return float(value)


def _one(path: str, key: str, node) -> dict:
    where = f"{path}: {key}"
    if not isinstance(node, dict) or len(node) != 1:
        raise ConfigError(f"{where}: expected one of {{{': ..., '.join(KINDS)}: ...}}, got {node!r}")
    (kind, value), = node.items()
    if kind not in KINDS:
        raise ConfigError(f"{where}: unknown distribution '{kind}' (have: {', '.join(KINDS)}){did_you_mean(kind, KINDS)}")
    if kind == "choice":
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{where}: choice needs a non-empty list of values, got {value!r}")
        return {"kind": kind, "values": value}
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"{where}: {kind} needs [low, high], got {value!r}")
    low, high = (_number(v, f"{where}: {kind}") for v in value)
    if low > high:
        raise ConfigError(f"{where}: {kind} [{low:g}, {high:g}]: low > high")
    if kind == "log_uniform" and low <= 0:
        raise ConfigError(f"{where}: log_uniform [{low:g}, {high:g}]: low must be > 0 (a logarithm's range)")
    return {"kind": kind, "low": low, "high": high}


def load_space(path: str | Path, cfg) -> dict[str, dict]:
    """{config key: {kind, low, high} or {kind, values}} from the YAML file, every key checked
    against the resolved config `cfg`."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--space: file not found: {path}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--space {path}: not readable YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(loaded, dict) or not loaded:
        raise ConfigError(f"--space {path}: expected a mapping of config keys to distributions")
    space = {}
    for key, node in loaded.items():
        key = str(key)
        if OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
            raise ConfigError(f"--space {path}: {key} is not a key of the config (a search may only change what "
                              "the config sets)")
        space[key] = _one(f"--space {path}", key, node)
    return space


def canonical(space: dict) -> str:
    """The space as one JSON text: two studies of the same space compare equal."""
    return json.dumps(space, sort_keys=True)


def suggest(trial, space: dict) -> dict:
    """One value per key from an Optuna trial."""
    values = {}
    for key, spec in space.items():
        if spec["kind"] == "choice":
            values[key] = trial.suggest_categorical(key, spec["values"])
        else:
            values[key] = trial.suggest_float(key, spec["low"], spec["high"], log=spec["kind"] == "log_uniform")
    return values


def as_override(key: str, value) -> str:
    """`key=value` as tools/train.py reads it (YAML scalars: 0.001, 16, true, a quoted string)."""
    return f"{key}={json.dumps(value) if isinstance(value, str) else yaml.safe_dump(value).splitlines()[0]}"

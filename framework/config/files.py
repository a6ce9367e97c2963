"""Config files: YAML as configs read it (`1e-3` is a float) and `_base_` inheritance.

`load_with_bases(path)` reads a file and its `_base_` files (paths relative to the file that
lists them), merged in order, the file itself last; a node whose `type` changes replaces the
base node, and the keys it drops are reported in `notes`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from framework.config.custom_imports import locate
from framework.errors import ConfigError


class _YamlLoader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, where `1e-3` (no dot) is a string; in a config it means 0.001."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def parse_yaml(text):
    return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass


def _read_yaml(path: Path, *, origin: str | None = None) -> dict:
    if not path.is_file():
        where = f" (listed in _base_ of {origin})" if origin else ""
        raise ConfigError(f"config file not found: {path}{where}")
    try:
        with open(path, encoding="utf-8") as f:
            data = parse_yaml(f)
    except UnicodeDecodeError as err:  # an image, an archive, a checkpoint given as --config
        raise ConfigError(f"{path}: not a YAML config: not UTF-8 text (byte {err.start} is {err.object[err.start]:#04x})") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{path}:{line} invalid YAML: {problem}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {type(data).__name__}")
    return data


def merge_nodes(base: Any, child: Any, where: str = "", notes: list[str] | None = None) -> Any:
    """Merge `child` into `base` (child wins); a change of component `type` replaces the node,
    and a line naming the base's keys that were dropped with it is added to `notes`."""
    if isinstance(base, dict) and isinstance(child, dict):
        if "type" in child and "type" in base and child["type"] != base["type"]:
            dropped = [k for k in base if k not in child]
            if dropped and notes is not None:
                notes.append(f"{where or 'config'}: type {base['type']} -> {child['type']} replaces the base's node; "
                             f"dropped its keys {', '.join(map(str, dropped))} (set them again if still wanted)")
            return child
        merged = dict(base)
        for key, value in child.items():
            inner = f"{where}.{key}" if where else str(key)
            merged[key] = merge_nodes(base[key], value, inner, notes) if key in base else value
        return merged
    return child


def load_with_bases(path: Path, stack: tuple[Path, ...] = (), origin: str | None = None,
                     notes: list[str] | None = None) -> dict:
    path = path.resolve()
    if path in stack:
        chain = " -> ".join(str(p) for p in stack + (path,))
        raise ConfigError(f"_base_ cycle: {chain}")
    data = _read_yaml(path, origin=origin)
    if "custom_imports" in data:  # names and paths relative to the file that lists them
        data["custom_imports"] = locate(data["custom_imports"], path.parent)
    bases = data.pop("_base_", [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list):
        raise ConfigError(f"{path}: _base_ must be a path or a list of paths, got {bases!r}")
    merged: dict = {}
    for base in bases:
        base_path = (path.parent / base) if not os.path.isabs(base) else Path(base)
        merged = merge_nodes(merged, load_with_bases(base_path, stack + (path,), str(path), notes), notes=notes)
    return merge_nodes(merged, data, notes=notes)

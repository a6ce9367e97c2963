"""YAML configs: `_base_` inheritance, `${...}` interpolation, `key=value` overrides, validation.

    cfg = load_config("configs/segmentation/unet_shapes.yaml", ["optim.lr=0.01", "load_from=null"])

Rules a user can rely on:
- `_base_: [a.yaml, b.yaml]` (paths relative to the file) are merged in order, then the file
  itself; the later one wins key by key. A node whose `type` differs from the base's `type`
  replaces the base node instead of merging into it, so switching `UNet` for `DeepLabV3`
  never drags UNet's keywords along.
- Overrides `a.b.c=value` are parsed as YAML (`[1, 2]`, `null`, `1e-3`), applied in order
  (a repeated key: the last wins), and must name an existing key; `+a.b.c=value` adds a new one.
- Unknown top-level keys are errors; every public key has a default (see `DEFAULTS`).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from framework.errors import ConfigError
from framework.registry import did_you_mean

REQUIRED = "???"  # OmegaConf's marker for a mandatory value

# Every top-level key a config may have, with its default. Sections given as dicts are
# validated one level deeper as well (unknown `train.*` keys are errors too).
DEFAULTS: dict[str, Any] = {
    "work_dir": None,  # default: work_dirs/<config file name>
    "seed": 0,
    "deterministic": False,  # deterministic algorithms (slower), for exact reproduction
    "device": "auto",  # auto (CUDA when present, else CPU), cpu, cuda, cuda:1
    "custom_imports": [],  # modules imported before anything is built (user registrations)
    "load_from": None,  # weights of the whole task to start from (not a resume): a path or {checkpoint, ...}
    "auto_resume": "auto",  # true: resume from the work dir's latest checkpoint when there is one;
    # auto: only when torchrun restarted the workers (TORCHELASTIC_RESTART_COUNT > 0); false: never
    "task": REQUIRED,
    "data": REQUIRED,
    "optim": None,  # one optimizer: {type, lr, ..., params?, scheduler?, clip_grad?}
    "optimizers": None,  # several, by name: {generator: {...}, discriminator: {...}}
    "metrics": [],
    "hooks": [],  # extra hooks: [{type: MyHook, ...}]
    "sync_bn": False,  # BatchNorm statistics over all processes (multi-process runs only)
    "channels_last": False,  # NHWC memory format for the task's networks (faster convolutions)
    "compile": False,  # torch.compile each trainable network: true, or {backend, mode, dynamic, fullgraph, options}
    "amp": {
        "enabled": False,
        "dtype": "float16",  # float16 (with a GradScaler) or bfloat16 (no scaler; works on CPU)
    },
    "dist": {
        "backend": "auto",  # auto: nccl on CUDA, gloo on CPU
        "timeout": 1800,  # seconds a collective may wait before every rank fails
        "find_unused_parameters": False,  # slow escape hatch for networks that skip layers
        "broadcast_buffers": True,
    },
    "train": {
        "max_iters": None,
        "max_epochs": None,  # alternative to max_iters
        "log_interval": 50,
        "val_interval": 1000,  # 0 disables evaluation during training
        "val_at_start": False,  # evaluate once before the first iteration
        "ckpt_interval": 1000,
        "keep_last": 3,  # iteration checkpoints kept (the best one is kept apart)
        "best_metric": None,  # e.g. mIoU: keeps checkpoints/best.pth
        "best_mode": "max",
        "vis_images": 4,  # images written to TensorBoard per evaluation
        "progress_bar": "auto",  # auto: only when attached to a terminal
        "accumulate": 1,  # micro-batches per optimizer step (gradient accumulation)
    },
}

SECTIONS_WITH_FIXED_KEYS = ("train", "amp", "dist")


# ----------------------------------------------------------------------------- loading


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


def merge_nodes(base: Any, child: Any) -> Any:
    """Merge `child` into `base` (child wins); a change of component `type` replaces the node."""
    if isinstance(base, dict) and isinstance(child, dict):
        if "type" in child and "type" in base and child["type"] != base["type"]:
            return child
        merged = dict(base)
        for key, value in child.items():
            merged[key] = merge_nodes(base[key], value) if key in base else value
        return merged
    return child


def _load_with_bases(path: Path, stack: tuple[Path, ...] = (), origin: str | None = None) -> dict:
    path = path.resolve()
    if path in stack:
        chain = " -> ".join(str(p) for p in stack + (path,))
        raise ConfigError(f"_base_ cycle: {chain}")
    data = _read_yaml(path, origin=origin)
    bases = data.pop("_base_", [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list):
        raise ConfigError(f"{path}: _base_ must be a path or a list of paths, got {bases!r}")
    merged: dict = {}
    for base in bases:
        base_path = (path.parent / base) if not os.path.isabs(base) else Path(base)
        merged = merge_nodes(merged, _load_with_bases(base_path, stack + (path,), origin=str(path)))
    return merge_nodes(merged, data)


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
    return [int(p) if p.isdigit() else p for p in key.split(".")]


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


def _validate_keys(cfg: dict, source: str) -> None:
    for key in cfg:
        if key not in DEFAULTS:
            raise ConfigError(f"{source}: unknown top-level key '{key}'{did_you_mean(key, DEFAULTS)}")
    for section in SECTIONS_WITH_FIXED_KEYS:
        allowed = DEFAULTS[section]
        value = cfg.get(section)
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{section}' must be a mapping, got {value!r}")
        for key in value:
            if key not in allowed:
                raise ConfigError(f"{source}: unknown key '{section}.{key}'{did_you_mean(key, allowed)}")
    for key in ("task", "data"):
        if cfg.get(key) in (None, REQUIRED):
            raise ConfigError(f"{source}: the config has no '{key}' section")
    if cfg.get("optim") is not None and cfg.get("optimizers") is not None:
        raise ConfigError(f"{source}: give either 'optim' (one optimizer) or 'optimizers' (by name), not both")
    train = cfg["train"]
    if train.get("max_iters") is None and train.get("max_epochs") is None:
        raise ConfigError(f"{source}: set train.max_iters (or train.max_epochs)")


def load_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """Load, merge, override, resolve and validate a config file."""
    path = Path(path)
    merged = merge_nodes(_deep_copy(DEFAULTS), _load_with_bases(path))
    for text in overrides:
        apply_override(merged, *parse_override(text))
    _validate_keys(merged, str(path))
    try:
        cfg = OmegaConf.create(merged)
        OmegaConf.resolve(cfg)  # ${...} interpolations, after overrides so they see new values
    except OmegaConfBaseException as err:
        first = str(err).splitlines()[0]
        raise ConfigError(f"{path}: {first}") from err
    cfg._set_flag("allow_objects", False)
    return cfg


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def to_plain(cfg: DictConfig | ListConfig | Any) -> Any:
    """A resolved plain dict/list of a config node."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def save_config(cfg: DictConfig, path: str | os.PathLike) -> None:
    """Write the resolved config (what a run actually used) as YAML, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(OmegaConf.to_yaml(cfg, resolve=True), encoding="utf-8")
    os.replace(tmp, path)


def import_custom_modules(cfg: DictConfig) -> None:
    """Import `custom_imports` so their `@REGISTRY.register()` decorators run before building."""
    modules = cfg.get("custom_imports") or []
    if isinstance(modules, str):
        modules = [modules]
    if os.getcwd() not in sys.path:  # user projects are imported relative to where they run
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ConfigError(f"custom_imports: cannot import '{name}': {err}") from err


def default_work_dir(config_path: str | os.PathLike) -> str:
    return os.path.join("work_dirs", Path(config_path).stem)

"""Registries: name -> class tables from which config nodes `{type: Name, **kwargs}` are built.

    @MODELS.register()            # registered under the class name
    class UNet(nn.Module): ...

    @LOSSES.register("Dice")      # or under an alias
    class DiceLoss(nn.Module): ...

    model = MODELS.build({"type": "UNet", "num_classes": 4}, path="task.model")

`build` is recursive: a keyword whose value is itself a node (or a list of nodes) is built
first, looked up in the same registry and then in every other one, so a task node builds its
model and loss, a dataset its transforms, a weighted loss its terms. Mistakes are reported
as `ConfigError`s that name the config path of the node, the registry and close matches.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from framework.errors import ConfigError, UserError
from framework.keywords import check_booleans

_ALL_REGISTRIES: list[Registry] = []


def is_node(value: Any) -> bool:
    """True for a config node that names a component: a mapping with a `type` key."""
    return isinstance(value, Mapping) and "type" in value


def close_matches(word: str, candidates, n: int = 3) -> list[str]:
    """Candidates that look like `word`, case-insensitively, best first."""
    by_lower = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[f] for f in found]


def did_you_mean(word: str, candidates) -> str:
    matches = close_matches(word, candidates)
    return f"; did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""


def reject_unknown_keys(mapping: Mapping, allowed, path: str) -> None:
    """A ConfigError naming the first key of `mapping` that is not in `allowed`, with close matches."""
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}: unknown key{did_you_mean(str(key), allowed)} "
                              f"(allowed: {', '.join(allowed)})")


class Registry:
    """A named table of classes (or factory functions) that config nodes refer to by name."""

    def __init__(self, name: str):
        self.name = name
        self._extra_keys: dict[tuple[str, ...], Callable[[Any, dict, str], None]] = {}
        self._table: dict[str, Callable] = {}
        self._sources: list[Callable[[], Any]] = []  # loaders not run yet (see add_source)
        _ALL_REGISTRIES.append(self)

    def add_source(self, loader: Callable[[], Any]) -> None:
        """Fill the registry later: `loader()` (which registers entries, e.g. by importing a
        module) runs on the first lookup, listing or registration. Built-in components come in
        this way, so `import framework` imports neither torch nor albumentations, and a config
        that uses no transform never imports albumentations."""
        self._sources.append(loader)

    @property
    def _entries(self) -> dict[str, Callable]:
        while self._sources:  # pop first: a loader's own registrations come back here
            self._sources.pop(0)()
        return self._table

    def __repr__(self) -> str:
        return f"Registry({self.name!r}, {len(self._entries)} entries)"

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def register(self, name: str | None = None) -> Callable:
        """Decorator registering a class or function under `name` (default: its own name)."""

        def decorator(obj: Callable) -> Callable:
            self.add(obj, name)
            return obj

        return decorator

    def add(self, obj: Callable, name: str | None = None) -> None:
        key = name or obj.__name__
        if key in self._entries:
            existing = self._entries[key]
            raise KeyError(
                f"'{key}' is already registered in the {self.name} registry "
                f"(by {existing.__module__}.{existing.__qualname__}); pick another name"
            )
        self._table[key] = obj

    def allow_keys(self, keys: tuple[str, ...], receive: Callable[[Any, dict, str], None]) -> None:
        """Let this registry's nodes carry `keys` that the components themselves do not take.

        They are taken out of a node before it is built (unless its constructor has a keyword
        of that name), and `receive(component, {key: value}, path)` gets them with the built
        component. A higher layer declares them (the engine: a network's init/frozen/norm_eval),
        so this layer knows nothing of what they mean.
        """
        self._extra_keys[tuple(keys)] = receive

    def get(self, name: str, path: str = "") -> Callable:
        if name not in self._entries:
            where = f"{path}.type: " if path else ""
            hint = did_you_mean(name, self._entries)
            if not hint:  # maybe the user put a component of another kind here
                others = [r for r in _ALL_REGISTRIES if r is not self and name in r]
                if others:
                    hint = f"; '{name}' is in the {others[0].name} registry, not here"
            raise ConfigError(f"{where}unknown type '{name}' in the {self.name} registry{hint}")
        return self._entries[name]

    def build(self, cfg: Mapping, path: str | None = None, **default_args) -> Any:
        """Build the component a node describes; `default_args` fill keywords the node omits."""
        path = path or self.name
        cfg = to_plain(cfg)
        if not is_node(cfg):
            raise ConfigError(f"{path}: expected a mapping with a 'type' key, got {cfg!r}")
        kwargs = dict(cfg)
        type_name = kwargs.pop("type")
        if not isinstance(type_name, str):
            raise ConfigError(f"{path}.type: expected a component name, got {type_name!r}")
        factory = self.get(type_name, path)
        for key, value in default_args.items():
            kwargs.setdefault(key, value)
        extras = self._take_extra_keys(factory, kwargs)
        kwargs = {k: self._build_nested(v, f"{path}.{k}") for k, v in kwargs.items()}
        _check_keywords(factory, type_name, kwargs, path)
        check_booleans(factory, kwargs, path)
        component = self._construct(factory, type_name, kwargs, path)
        for receive, settings in extras:
            receive(component, settings, path)
        return component

    def _take_extra_keys(self, factory: Callable, kwargs: dict) -> list[tuple[Callable, dict]]:
        """Pop the `allow_keys` keys a node carries: [(receiver, {key: value})]."""
        own = accepted_keywords(factory)[0] if self._extra_keys else []
        taken = []
        for keys, receive in self._extra_keys.items():
            settings = {k: kwargs.pop(k) for k in keys if k in kwargs and k not in own}
            if settings:
                taken.append((receive, settings))
        return taken

    @staticmethod
    def _construct(factory: Callable, type_name: str, kwargs: dict, path: str) -> Any:
        try:
            return factory(**kwargs)
        except UserError as err:  # e.g. a dataset's missing folder: say which node it came from
            if str(err).startswith(path):
                raise
            raise type(err)(f"{path} ({type_name}): {err}") from err
        except (TypeError, ValueError, AssertionError) as err:
            # The constructor's own validation (value ranges, shapes) named by config path.
            raise ConfigError(f"{path} ({type_name}): {err}") from err

    def _build_nested(self, value: Any, path: str) -> Any:
        if is_node(value):
            return self._registry_for(value["type"], path).build(value, path)
        if isinstance(value, list) and value and all(is_node(v) for v in value):
            return [self._build_nested(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    def _registry_for(self, type_name: str, path: str) -> Registry:
        if type_name in self:
            return self
        # Registries already filled first: looking a model up must not import albumentations.
        owners = [r for r in _ALL_REGISTRIES if not r._sources and type_name in r._table]
        if not owners:
            owners = [r for r in _ALL_REGISTRIES if type_name in r]
        if len(owners) == 1:
            return owners[0]
        if len(owners) > 1:
            names = ", ".join(r.name for r in owners)
            raise ConfigError(f"{path}.type: '{type_name}' is ambiguous, it is in the {names} registries")
        every = {n for r in _ALL_REGISTRIES for n in r._entries}
        raise ConfigError(f"{path}.type: unknown type '{type_name}'{did_you_mean(type_name, every)}")


def to_plain(cfg: Any) -> Any:
    """OmegaConf containers -> plain dicts/lists (interpolations resolved), anything else unchanged."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def accepted_keywords(factory: Callable) -> tuple[list[str], bool]:
    """(keyword names `factory` accepts, whether it also takes **kwargs)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have no signature: accept anything
        return [], True
    names, takes_any = [], False
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            takes_any = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            names.append(p.name)
    return names, takes_any


def _check_keywords(factory: Callable, type_name: str, kwargs: dict, path: str) -> None:
    names, takes_any = accepted_keywords(factory)
    if takes_any:
        return
    for key in kwargs:
        if key not in names:
            hint = did_you_mean(key, names)
            raise ConfigError(
                f"{path}.{key}: {type_name} has no parameter '{key}'{hint} "
                f"(it accepts: {', '.join(names) or 'no parameters'})"
            )


MODELS = Registry("models")
LOSSES = Registry("losses")
DATASETS = Registry("datasets")
TRANSFORMS = Registry("transforms")
OPTIMIZERS = Registry("optimizers")
SCHEDULERS = Registry("schedulers")
METRICS = Registry("metrics")
HOOKS = Registry("hooks")
LOGGERS = Registry("loggers")
TASKS = Registry("tasks")


def _importer(module: str) -> Callable[[], Any]:
    import importlib

    return lambda: importlib.import_module(module)


# The built-in components, imported on first use of their registry (framework/__init__.py).
MODELS.add_source(_importer("framework.models"))
LOSSES.add_source(_importer("framework.losses"))
DATASETS.add_source(_importer("framework.data"))
TRANSFORMS.add_source(_importer("framework.data.transforms"))
OPTIMIZERS.add_source(_importer("framework.optim.optimizers"))
SCHEDULERS.add_source(_importer("framework.optim.schedulers"))
METRICS.add_source(_importer("framework.metrics"))
HOOKS.add_source(_importer("framework.engine.hooks"))
LOGGERS.add_source(_importer("framework.engine.loggers"))
TASKS.add_source(_importer("framework.tasks"))


def import_without(module: str, unused: tuple[str, ...]):
    """`module`, imported with the optional dependencies `unused` marked absent while it loads.

    For libraries that import an optional package at import time for a feature the framework
    never uses: albumentations' Hugging Face Hub mixin (huggingface_hub and its HTTP stack: 0.73 s
    of albumentations' 2.2 s in `python -X importtime`, a loaded 2-core machine) and TensorBoard's
    S3 file system (boto3: 0.24 s of `torch.utils.tensorboard`'s 0.48 s). Each catches the
    ImportError and goes without the feature. The marks are removed after, so timm's encoders or
    user code import those packages as usual; one already imported is not hidden (it cost nothing more).
    """
    if module in sys.modules:
        return sys.modules[module]
    hidden = [name for name in unused if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # `import name` raises ImportError
    try:
        return importlib.import_module(module)
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]

"""Partial loading of weights into a module: which file tensors go where (prefix, rename,
names with or without `module.`/`_orig_mod.`, shape filter, stem adaptation), and the report
of what was loaded, adapted, missing, unexpected or reshaped. framework/engine/pretrained.py
decides what to load (encoder weights, `init`, `load_from`); this module does the loading.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from framework.errors import CheckpointError, ConfigError
from framework.models.encoders.stem import ADAPT_METHODS
from framework.registry import reject_unknown_keys
from framework.serialization.weights_file import read_weights_file
from framework.weights.stem_adapt import adapt_stems

logger = logging.getLogger("framework")

WRAPPER_COMPONENTS = ("module", "_orig_mod")  # added to names by DDP and torch.compile
LOAD_KEYS = ("checkpoint", "prefix", "rename", "strict", "min_loaded_ratio", "adapt_in_channels")
REPORT_FILE = "load_report.json"
LISTED_IN_ERRORS = 10


@dataclass
class LoadSpec:
    """Where weights come from and how their names map onto a module's."""

    checkpoint: str
    prefix: str = ""
    rename: dict[str, str] = field(default_factory=dict)
    strict: bool = False
    min_loaded_ratio: float = 0.0
    adapt_in_channels: str | None = None  # zeros | mean: adapt stems (framework/weights/stem_adapt.py)
    # The part of the module this load is for (a key prefix such as "encoder."), set by the
    # framework, not the config: a shape mismatch inside it is an error (weights of another
    # model), and min_loaded_ratio counts its tensors only.
    scope: str | None = None

    @classmethod
    def from_config(cls, value, path: str, default_ratio: float = 0.0) -> LoadSpec:
        """`default_ratio`: min_loaded_ratio when the config gives none (load_from: 0.5)."""
        if isinstance(value, (str, Path)):
            value = {"checkpoint": str(value)}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a file path or {{checkpoint: PATH, ...}}, got {value!r}")
        reject_unknown_keys(value, LOAD_KEYS, path)
        if not value.get("checkpoint"):
            raise ConfigError(f"{path}.checkpoint: missing (the file to load)")
        rename = value.get("rename") or {}
        if not isinstance(rename, Mapping):
            raise ConfigError(f"{path}.rename: expected {{regex: replacement}}, got {rename!r}")
        for pattern in rename:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ConfigError(f"{path}.rename: '{pattern}' is not a regular expression: {err}") from err
        ratio = value.get("min_loaded_ratio", default_ratio)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"{path}.min_loaded_ratio: must be a number in [0, 1], got {ratio!r}")
        strict = value.get("strict", False)
        if not isinstance(strict, bool):  # bool("false") would be True
            raise ConfigError(f"{path}.strict: expected true or false, got {strict!r}")
        adapt = value.get("adapt_in_channels")
        if adapt is not None and adapt not in ADAPT_METHODS:
            raise ConfigError(f"{path}.adapt_in_channels: expected {' or '.join(ADAPT_METHODS)} (or null), got {adapt!r}")
        return cls(checkpoint=str(value["checkpoint"]), prefix=str(value.get("prefix") or ""),
                   rename={str(k): str(v) for k, v in rename.items()}, strict=strict, min_loaded_ratio=float(ratio),
                   adapt_in_channels=adapt)


@dataclass
class LoadReport:
    """What one load did. Keys are the module's names; `source` keys are the file's."""

    target: str
    spec: LoadSpec
    module_tensors: int
    loaded: list[dict] = field(default_factory=list)  # {key, source}
    missing: list[dict] = field(default_factory=list)  # {key, shape}
    unexpected: list[dict] = field(default_factory=list)  # {key, source, shape}
    shape_mismatched: list[dict] = field(default_factory=list)  # {key, source, checkpoint_shape, model_shape}
    outside_prefix: int = 0  # tensors of the file not under `prefix`: not considered
    module_counters: int = 0  # BatchNorm num_batches_tracked of the module: not counted as loaded weights
    module_learned_in_scope: int = 0  # the module's tensors inside spec.scope, counters left out

    def counts(self) -> dict[str, int]:
        adapted = sum(1 for e in self.loaded if e.get("adapted"))
        return {"loaded": len(self.loaded), "missing": len(self.missing), "unexpected": len(self.unexpected),
                "shape_mismatched": len(self.shape_mismatched), "outside_prefix": self.outside_prefix,
                "module_tensors": self.module_tensors, **({"adapted": adapted} if adapted else {})}

    @property
    def loaded_learned(self) -> int:
        """Loaded tensors other than BatchNorm's step counters (which every BN network shares)."""
        return sum(not is_counter(e["key"]) for e in self.loaded)

    @property
    def loaded_ratio(self) -> float:
        return self.loaded_learned / max(self.module_tensors - self.module_counters, 1)

    def in_scope(self, key: str) -> bool:
        return self.spec.scope is None or key.startswith(self.spec.scope)

    def scope_ratio(self) -> tuple[int, int]:
        """(loaded, learned) tensors inside the spec's scope, BatchNorm counters left out."""
        loaded = sum(1 for e in self.loaded if self.in_scope(e["key"]) and not is_counter(e["key"]))
        learned = self.module_learned_in_scope
        return loaded, learned

    def left_random(self) -> str:
        """One line: how much was loaded, and which of the module's tensors keep their initial
        (random) values, by cause."""
        learned = self.module_tensors - self.module_counters
        line = f"{self.target}: loaded {self.loaded_learned} of {learned} tensors ({self.loaded_ratio:.0%})"
        mismatched = [e for e in self.shape_mismatched if not is_counter(e["key"])]
        missing = [e for e in self.missing if not is_counter(e["key"])]
        if not (mismatched or missing):
            return line + "; none left at its initial values"
        parts = []
        if mismatched:
            parts.append(f"{len(mismatched)} of another shape in the file ({_examples(mismatched, lambda e: e['key'])})")
        if missing:
            parts.append(f"{len(missing)} not in the file ({_examples(missing, lambda e: e['key'])})")
        return line + "; left at their initial (random) values: " + ", ".join(parts)

    def to_json(self) -> dict:
        return {"checkpoint": self.spec.checkpoint, "prefix": self.spec.prefix, "rename": self.spec.rename,
                "strict": self.spec.strict, "counts": self.counts(), "loaded": self.loaded,
                "missing": self.missing, "unexpected": self.unexpected, "shape_mismatched": self.shape_mismatched}

    def table(self) -> str:
        rows = [("loaded", len(self.loaded), f"{self.loaded_ratio:.0%} of the module's "
                 f"{self.module_tensors - self.module_counters} tensors besides BatchNorm counters"),
                ("missing", len(self.missing), _examples(self.missing, lambda e: f"{e['key']} {e['shape']}")),
                ("unexpected", len(self.unexpected), _examples(self.unexpected, lambda e: f"{e['source']} {e['shape']}")),
                ("shape mismatch", len(self.shape_mismatched), _examples(
                    self.shape_mismatched, lambda e: f"{e['key']} {e['checkpoint_shape']} vs {e['model_shape']}")),
                ("outside prefix", self.outside_prefix, f"prefix '{self.spec.prefix}'" if self.spec.prefix else ""),
                ("adapted", self.counts().get("adapted", 0), _examples([e for e in self.loaded if e.get("adapted")], lambda e: (
                    f"{e['key']} {e['checkpoint_shape']} -> {e['model_shape']} ({e['adapted']})")))]
        lines = [f"{self.target} <- {self.spec.checkpoint}"]
        lines += [f"  {name:<15}{count:>6}  {detail}".rstrip() for name, count, detail in rows]
        return "\n".join(lines)

    def problems(self) -> str:
        """Missing, unexpected and reshaped keys, listed, for an error message."""
        parts = []
        for name, entries, show in (("missing", self.missing, lambda e: e["key"]),
                                    ("unexpected", self.unexpected, lambda e: e["source"]),
                                    ("shape mismatch", self.shape_mismatched,
                                     lambda e: f"{e['key']} {e['checkpoint_shape']} vs {e['model_shape']}")):
            if entries:
                parts.append(f"{len(entries)} {name}: {_examples(entries, show, LISTED_IN_ERRORS)}")
        return "; ".join(parts)


def _examples(entries: list[dict], show, limit: int = 3) -> str:
    text = ", ".join(show(e) for e in entries[:limit])
    return text + (f", ... ({len(entries) - limit} more)" if len(entries) > limit else "")


# ----------------------------------------------------------------------------- matching


def weights_in_file(path: str) -> dict[str, torch.Tensor]:
    """The state dict in a weights file or a training checkpoint (safely read)."""
    state = read_weights_file(path)
    if "task" in state and "meta" in state:  # a training checkpoint of this framework
        state = state["task"]
    else:
        for wrapper in ("state_dict", "model"):
            if isinstance(state.get(wrapper), Mapping):
                state = state[wrapper]
                break
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"{path}: holds no tensors to load (keys: {', '.join(map(str, list(state)[:5]))})")
    return tensors


def is_counter(key: str) -> bool:
    return key.endswith("num_batches_tracked")


def _without_wrappers(key: str) -> str:
    return ".".join(p for p in key.split(".") if p not in WRAPPER_COMPONENTS)


def _keys_by_plain_name(own: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The module's keys by their name without wrapper components (names two keys share left out)."""
    by_plain_name: dict[str, str] = {}
    ambiguous = set()
    for key in own:
        plain = _without_wrappers(key)
        if plain in by_plain_name:
            ambiguous.add(plain)
        by_plain_name[plain] = key
    for plain in ambiguous:
        del by_plain_name[plain]
    return by_plain_name


def match_weights(weights: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor], spec: LoadSpec,
                  target: str) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """The tensors of `weights` to load into a module whose state dict is `own`, and the report.

    A file key goes through: prefix selection, the rename rules, then matching against the
    module's keys, exactly or with `module.`/`_orig_mod.` components ignored on both sides.
    """
    report = LoadReport(target=target, spec=spec, module_tensors=len(own), module_counters=sum(map(is_counter, own)))
    report.module_learned_in_scope = sum(1 for k in own if report.in_scope(k) and not is_counter(k))
    by_plain_name = _keys_by_plain_name(own)
    selected: dict[str, torch.Tensor] = {}
    taken_from: dict[str, str] = {}
    for source, tensor in weights.items():
        name = _without_wrappers(source)
        if spec.prefix:
            if not name.startswith(spec.prefix):
                report.outside_prefix += 1
                continue
            name = name[len(spec.prefix):]
        for pattern, replacement in spec.rename.items():
            name = re.sub(pattern, replacement, name)
        key = name if name in own else by_plain_name.get(_without_wrappers(name))
        if key is None or key in taken_from:
            report.unexpected.append({"key": name, "source": source, "shape": list(tensor.shape)})
        elif tensor.shape != own[key].shape:
            report.shape_mismatched.append({"key": key, "source": source, "checkpoint_shape": list(tensor.shape),
                                            "model_shape": list(own[key].shape)})
            taken_from[key] = source
        else:
            selected[key] = tensor
            taken_from[key] = source
            report.loaded.append({"key": key, "source": source})
    report.missing = [{"key": k, "shape": list(v.shape)} for k, v in own.items() if k not in taken_from]
    # In the module's order (file order differs between formats: safetensors sorts its keys).
    position = {key: i for i, key in enumerate(own)}
    report.loaded.sort(key=lambda e: position[e["key"]])
    report.shape_mismatched.sort(key=lambda e: position[e["key"]])
    report.unexpected.sort(key=lambda e: e["source"])
    return selected, report


def load_into(module: nn.Module, spec: LoadSpec, target: str) -> LoadReport:
    """Load what matches of `spec.checkpoint` into `module`; errors per `strict`/`min_loaded_ratio`."""
    own = module.state_dict()
    weights = weights_in_file(spec.checkpoint)
    selected, report = match_weights(weights, own, spec, target)
    if spec.adapt_in_channels:
        adapt_stems(weights, own, selected, report, spec.adapt_in_channels)
    where = f"{target} <- {spec.checkpoint}"
    if spec.strict and report.problems():
        raise CheckpointError(f"{where} (strict): {report.problems()}")
    if not report.loaded_learned:  # BatchNorm counters alone carry nothing learned
        only = " but BatchNorm num_batches_tracked counters" if selected else ""
        raise CheckpointError(f"{where}: no tensor{only} matched the module's names and shapes "
                              f"({report.problems() or 'nothing under the prefix'}); check prefix and rename")
    if spec.scope is not None:
        refuse_mismatches_in_scope(report, where)
    loaded, learned = report.scope_ratio()
    if loaded / max(learned, 1) < spec.min_loaded_ratio:
        part = f" of {spec.scope.rstrip('.')}" if spec.scope else ""
        raise CheckpointError(f"{where}: loaded {loaded} of {learned} tensors{part} besides BatchNorm "
                              f"counters ({loaded / max(learned, 1):.0%}), below min_loaded_ratio "
                              f"{spec.min_loaded_ratio:g}; {report.problems()}"[:1200])
    module.load_state_dict(selected, strict=False)
    return report


def refuse_mismatches_in_scope(report: LoadReport, where: str) -> None:
    """Inside the part being loaded (an encoder), a tensor of another shape means weights of
    another model (resnet50 for resnet18): an error, not a silent skip. The stem, when its
    input channels differ, was adapted before (adapt_in_channels) and is not a mismatch."""
    inside = [e for e in report.shape_mismatched if report.in_scope(e["key"])]
    if inside:
        shown = _examples(inside, lambda e: f"{e['key']} {e['checkpoint_shape']} vs {e['model_shape']}", 3)
        raise CheckpointError(f"{where}: {len(inside)} tensors of {report.spec.scope.rstrip('.')} have another shape "
                              f"in the file ({shown}): are these weights of another model?")

"""Parameter groups of one optimizer: an encoder at a fraction of the learning rate.

    optim:
      type: AdamW
      lr: 1.0e-3
      param_groups:                       # optional; parameters no group takes form the first group
        - {name: encoder, params: model.encoder, lr_mult: 0.1}    # any other key: the optimizer's own
    hooks: [{type: FrozenStartHook, iters: 200, groups: [encoder]}]   # optional: encoder fixed at first

`params` names submodules of the task (as an optimizer entry's `params`), `lr_mult` scales the
entry's `lr`, and keys such as `weight_decay` or `betas` override the optimizer's for the group.
Schedulers scale each group's own initial learning rate, so the ratio holds over the schedule.
The first group is the rest (the decoder and head), so the logged `lr` is the base one.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from framework.errors import ConfigError
from framework.optim.ownership import select_params
from framework.registry import OPTIMIZERS, accepted_keywords, reject_unknown_keys

GROUP_KEYS = ("name", "params", "lr_mult")


def split_param_groups(task: nn.Module, params: list[nn.Parameter], node: Mapping, groups,
                       path: str) -> list[nn.Parameter] | list[dict]:
    """`params` unchanged without `param_groups`; else [rest group, group 1, ...] as torch takes them.
    A group names submodules as an optimizer entry's `params` does (`select_params`)."""
    if not groups:
        return params
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise ConfigError(f"{path}.param_groups: expected a list of {{params: <submodule>, lr_mult: ...}}, got {groups!r}")
    optimizer_keys = accepted_keywords(OPTIMIZERS.get(node["type"], path))[0]
    taken: dict[int, str] = {}
    built = []
    for i, group in enumerate(groups):
        where = f"{path}.param_groups[{i}]"
        reject_unknown_keys(group, list(GROUP_KEYS) + [k for k in optimizer_keys if k != "params"], where)
        if "params" not in group:
            raise ConfigError(f"{where}.params: missing (the submodule(s) of the task this group trains)")
        name = str(group.get("name", f"group{i + 1}"))
        trainable = {id(p) for p in params}
        chosen = [p for p in select_params(task, group["params"], where) if id(p) in trainable]
        if not chosen:
            raise ConfigError(f"{where}.params: selects no trainable parameter of this optimizer")
        for p in chosen:
            if id(p) in taken:
                raise ConfigError(f"{where}.params: parameters of '{group['params']}' are already in group '{taken[id(p)]}'")
            taken[id(p)] = name
        options = {k: v for k, v in group.items() if k not in GROUP_KEYS}
        if "lr_mult" in group:
            options["lr"] = _base_lr(node, where) * _multiplier(group["lr_mult"], where)
        built.append({"params": chosen, "name": name, **options})
    rest = [p for p in params if id(p) not in taken]
    return ([{"params": rest, "name": "default"}] if rest else []) + built


def _base_lr(node: Mapping, where: str) -> float:
    if not isinstance(node.get("lr"), (int, float)):
        raise ConfigError(f"{where}.lr_mult: scales the optimizer's lr, which the entry does not set")
    return float(node["lr"])


def _multiplier(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where}.lr_mult: expected a number >= 0, got {value!r}")
    return float(value)

"""Which optimizer trains which parameter: every trainable parameter of a task has exactly one.

An optimizer entry's `params` names submodules of the task (`generator`, `model.encoder`); an
entry without `params` takes every trainable parameter. A parameter claimed by two entries is
refused (`claim_params`), and so is a trainable parameter that no entry claims
(`refuse_unoptimized`): it would keep its initial values for the whole run while the log
counted it as trained. A network that is meant to stay fixed says so in the config (`frozen:`
in its model node), which turns its `requires_grad` off before the optimizers are built.
"""

from __future__ import annotations

from torch import nn

from framework.errors import ConfigError
from framework.registry import did_you_mean


def select_params(task: nn.Module, selector, path: str) -> list[nn.Parameter]:
    """Trainable parameters of the task's submodules named by `selector` (all when None)."""
    if selector is None:
        return [p for p in task.parameters() if p.requires_grad]
    names = [selector] if isinstance(selector, str) else list(selector)
    modules = dict(task.named_modules())
    params = []
    for name in names:
        if name not in modules or not name:
            children = [n for n, _ in task.named_children()]
            raise ConfigError(
                f"{path}.params: the task has no submodule '{name}'{did_you_mean(str(name), children)} "
                f"(it has: {', '.join(children)})"
            )
        params.extend(p for p in modules[name].parameters() if p.requires_grad)
    return params


def claim_params(task: nn.Module, selector, path: str, name: str, owner: dict[int, str]) -> list[nn.Parameter]:
    """The parameters optimizer `name` selects, each claimed by one optimizer only."""
    params = select_params(task, selector, path)
    if not params:
        raise ConfigError(f"{path}.params: selects no trainable parameters")
    for p in params:
        if id(p) in owner:
            raise ConfigError(f"{path}.params: parameters of '{selector}' are already optimized by "
                              f"'{owner[id(p)]}'; each parameter must have one optimizer")
        owner[id(p)] = name
    return params


def unoptimized_modules(task: nn.Module, owner: dict[int, str]) -> list[tuple[str, int]]:
    """(submodule name, parameter count) of the largest submodules whose trainable parameters
    no optimizer claimed, parents before children: `model.decoder`, not each of its layers.
    A parameter held directly by a partly claimed module is named `module.parameter`."""
    left: dict[str, int] = {}

    def visit(prefix: str, module: nn.Module) -> None:
        trainable = [p for p in module.parameters() if p.requires_grad]
        if not trainable:
            return
        if all(id(p) not in owner for p in trainable):
            left[prefix] = sum(p.numel() for p in trainable)
            return
        for pname, p in module.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in owner:
                left[f"{prefix}.{pname}" if prefix else pname] = p.numel()
        for cname, child in module.named_children():
            visit(f"{prefix}.{cname}" if prefix else cname, child)

    visit("", task)
    return list(left.items())


def refuse_unoptimized(task: nn.Module, owner: dict[int, str], section: str) -> None:
    """A ConfigError naming the submodules with trainable parameters in no optimizer of
    `section` (`optim` or `optimizers`), with what to do about each way out."""
    left = unoptimized_modules(task, owner)
    if not left:
        return
    named = ", ".join(f"{name} ({short_count(count)})" for name, count in left)
    raise ConfigError(
        f"{section}: trainable parameters in no optimizer would keep their initial values: {named}; "
        f"add them to an optimizer's params, or freeze them with frozen: in their network's model node")


def short_count(count: int) -> str:
    """1234567 -> '1.23M', 12345 -> '12.3K', 123 -> '123'."""
    if count >= 1_000_000:
        return f"{count / 1e6:.2f}M"
    return f"{count / 1e3:.1f}K" if count >= 1000 else str(count)

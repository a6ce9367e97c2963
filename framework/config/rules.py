"""Declarative type and range rules for config values; the table is `SCHEMA` in framework/config/schema.py.

A rule is called as `rule(value, key, errors)`: it appends one `key: ...` line per problem to
`errors` (so every mistake of a config is reported at once) and returns the value to keep
(an integral float becomes an int: `max_iters: 1e4` means 10000). `expects` says in words
what the rule accepts; it is what an error line shows next to the value it got.

Ranged and choice rules also list their boundary: `inside` (values just within the range, every
choice) and `outside` (values just past it, a near-miss choice). tests/test_config_ranges.py
walks SCHEMA and tries both for every key, so a new ranged key is tested without a new test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from framework.registry import did_you_mean

REQUIRED = "???"  # OmegaConf's marker for a mandatory value


def shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Rule:
    """A leaf rule: `test(value)` says whether `value` is acceptable, after `convert`."""

    def __init__(self, expects: str, test: Callable[[Any], bool], convert: Callable[[Any], Any] = lambda v: v,
                 inside: tuple = (), outside: tuple = ()):
        self.expects, self.test, self.convert = expects, test, convert
        self.inside, self.outside = inside, outside  # the boundary, for tests (module docstring)

    def accepts(self, value: Any) -> bool:
        return self.test(self.convert(value))

    def __call__(self, value: Any, key: str, errors: list[str]) -> Any:
        if not self.accepts(value):
            errors.append(f"{key}: expected {self.expects}, got {shown(value)}")
            return value
        return self.convert(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(min: int, max: int | None = None) -> Rule:
    upper = f" and <= {max}" if max is not None else ""
    return Rule(f"an integer >= {min}{upper}",
                lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= min and (max is None or v <= max),
                convert=_integral, inside=(min,) + ((max,) if max is not None else ()),
                outside=(min - 1,) + ((max + 1,) if max is not None else ()))


def number(min: float | None = None, above: float | None = None, max: float | None = None,
           finite: bool = False) -> Rule:
    """A number in the bounds; `finite`: inf refused too (a learning rate; not a norm type, where
    inf means the max norm)."""
    bounds = [f">= {min:g}" if min is not None else "", f"> {above:g}" if above is not None else "",
              f"<= {max:g}" if max is not None else ""]
    # the boundary: the bound itself where it is allowed, the next float past it where it is not
    inside = [b for b in (min, max) if b is not None] + ([math.nextafter(above, math.inf)] if above is not None else [])
    outside = ([math.nextafter(min, -math.inf)] if min is not None else []) + ([above] if above is not None else []) \
        + ([math.nextafter(max, math.inf)] if max is not None else []) + ([math.inf] if finite and max is None else [])
    return Rule(" ".join(["a finite number" if finite else "a number", " and ".join(filter(None, bounds))]).strip(),
                lambda v: _is_number(v) and (min is None or v >= min) and (above is None or v > above)
                and (max is None or v <= max) and (not finite or math.isfinite(v)),
                inside=tuple(inside), outside=tuple(outside))


def one_of(*choices: Any) -> Rule:
    near_misses = tuple(c + "_" for c in choices if isinstance(c, str))  # "skip_" for "skip"
    return Rule(" or ".join(repr(c) if isinstance(c, str) else str(c).lower() for c in choices),
                lambda v: any(v is c if isinstance(c, bool) or c is None else v == c and not isinstance(v, bool)
                              for c in choices), inside=choices, outside=near_misses)


boolean = Rule("true or false", lambda v: isinstance(v, bool))
string = Rule("a string", lambda v: isinstance(v, str) and v != "")
node = Rule("a component node like {type: Name, ...}",
            lambda v: isinstance(v, Mapping) and isinstance(v.get("type"), str) and v["type"] != "")
strings = Rule("a string or a list of strings",
               lambda v: isinstance(v, str) or isinstance(v, list) and all(isinstance(s, str) for s in v))
mapping = Rule("a mapping", lambda v: isinstance(v, Mapping))


def optional(rule) -> Callable:
    """`rule`, or null."""
    def check(value, key, errors):
        return None if value is None else rule(value, key, errors)
    check.expects, check.inner = f"{rule.expects} or null", rule  # inner: read by docs/gen_config_reference.py
    return check


def any_of(*rules: Rule) -> Rule:
    def accepted(v):
        return any(r.accepts(v) for r in rules)
    return Rule(" or ".join(r.expects for r in rules), accepted,
                inside=tuple(v for r in rules for v in r.inside),
                outside=tuple(v for r in rules for v in r.outside if not accepted(v)))


def list_of(rule) -> Callable:
    def check(value, key, errors):
        if not isinstance(value, list):
            errors.append(f"{key}: expected a list, got {shown(value)}")
            return value
        return [rule(item, f"{key}[{i}]", errors) for i, item in enumerate(value)]
    check.expects, check.inner = "a list", rule
    return check


def section(fields: dict[str, Callable], required: tuple[str, ...] = (), open: bool = False) -> Callable:
    """A mapping whose keys are `fields` (unknown ones are errors unless `open`), each by its rule."""
    def check(value, key, errors):
        if not isinstance(value, Mapping):
            errors.append(f"{key}: expected a mapping, got {shown(value)}")
            return value
        checked = dict(value)
        for name in required:
            if value.get(name) in (None, REQUIRED):
                errors.append(f"{_join(key, name)}: missing (required)")
        for name, item in value.items():
            where = _join(key, str(name))
            if name in fields:
                if not (name in required and item in (None, REQUIRED)):
                    checked[name] = fields[name](item, where, errors)
            elif not open:
                level = "key" if key else "top-level key"
                errors.append(f"unknown {level} '{where}'{did_you_mean(str(name), fields)}")
        return checked
    check.expects, check.fields, check.required = "a mapping", fields, required
    return check


def each(rule) -> Callable:
    """A mapping of names (chosen by the user) to values of one kind."""
    def check(value, key, errors):
        if not isinstance(value, Mapping):
            errors.append(f"{key}: expected a mapping of names to {rule.expects}, got {shown(value)}")
            return value
        return {name: rule(item, _join(key, str(name)), errors) for name, item in value.items()}
    check.expects, check.inner = "a mapping", rule
    return check


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


# The one rule for every number of a config, component nodes included (task, model, loss, optimizer,
# scheduler, hook and metric keywords): NaN and infinity are refused at start-up, since a NaN
# threshold never fires and a NaN or infinite loss weight only shows up later as a diverged run.
# Keys (matched on the end of their path) where infinity means something, and what it means:
INFINITY_ALLOWED = {
    "clip_grad.norm_type": "the max norm, as in torch.nn.utils.clip_grad_norm_",
}
# What Python's float() reads as NaN or infinity: an override `task.cycle_weight=nan` arrives as
# this string (YAML's own spellings are .nan and .inf) and a component would float() it. Only in
# component nodes (`{type: ...}` and below), whose keywords go to Python constructors: elsewhere a
# string is checked by its key's own rule, and `work_dir: inf` is a folder name.
_NONFINITE_WORDS = {f"{sign}{word}" for sign in ("", "+", "-") for word in ("nan", "inf", "infinity")}


def _nonfinite(value: Any, in_component: bool) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return in_component and isinstance(value, str) and value.strip().lower() in _NONFINITE_WORDS


def _infinity_allowed(key: str, value: Any) -> bool:
    return isinstance(value, float) and math.isinf(value) and \
        any(key == allowed or key.endswith("." + allowed) for allowed in INFINITY_ALLOWED)


def nonfinite_numbers(value: Any, key: str = "", in_component: bool = False) -> list[str]:
    """One `key: ...` line per NaN or infinite number in `value` (a whole config), by key path
    (`hooks[0].stopping_threshold`), except infinity under `INFINITY_ALLOWED`."""
    if isinstance(value, Mapping):
        inside = in_component or "type" in value
        return [line for name, item in value.items()
                for line in nonfinite_numbers(item, _join(key, str(name)), inside)]
    if isinstance(value, list):
        return [line for i, item in enumerate(value) for line in nonfinite_numbers(item, f"{key}[{i}]", in_component)]
    if _nonfinite(value, in_component) and not _infinity_allowed(key, value):
        return [f"{key}: expected a finite number, got {shown(value)} (a config refuses NaN and infinity; "
                f"inf only in {', '.join(INFINITY_ALLOWED)})"]
    return []

"""The values a registered component's constructor types, checked before it is called
(framework/registry.py's `build`, beside its check of the keyword names): a keyword annotated
`bool` takes true or false only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from framework.errors import ConfigError

# a keyword's annotation as written (or as str() gives it) -> whether null is accepted too
BOOLEAN_ANNOTATIONS = {"bool": False, "bool | None": True, "None | bool": True, "Optional[bool]": True}


def check_booleans(factory: Callable, kwargs: dict[str, Any], path: str) -> None:
    """A keyword annotated `bool` takes true or false only (`bool | None`: or null): "false" (a quoted
    YAML value, an override key='false') is truthy, and a constructor's `bool(value)` reads it as true."""
    try:
        annotations = {p.name: p.annotation for p in inspect.signature(factory).parameters.values()}
    except (TypeError, ValueError):  # some builtins have no signature
        return
    for key, value in kwargs.items():
        annotation = annotations.get(key, "")
        text = (annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)).replace(
            "typing.", "")
        if text in BOOLEAN_ANNOTATIONS and not isinstance(value, bool) and not (
                value is None and BOOLEAN_ANNOTATIONS[text]):
            raise ConfigError(f"{path}.{key}: expected true or false, got {value!r}")

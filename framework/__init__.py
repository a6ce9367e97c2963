"""A config-driven PyTorch training framework for semantic segmentation and GANs.

Owns: the registries' entry point and lazy access to the packages (`framework.models`,
`framework.data`, ... imported on first attribute access); the albumentations environment setting.
May import: registry; the packages only lazily, by name (`importlib`), on first access.

`framework.load`, `framework.train`, `framework.evaluate` and `framework.Model` are the Python API
(framework/api, docs/python-api.md), imported on first access too.

`import framework` is cheap: it imports neither torch nor albumentations. Each registry imports
its built-in components on its first lookup (see `Registry.add_source` in framework/registry.py),
so the tools read and validate a config before paying for torch.
"""

import importlib
import os

__version__ = "0.3.0"

# albumentations asks PyPI for a newer version of itself over HTTPS on import (timeout 2 s)
# unless this is set: a request in every run, every DDP rank and every spawned worker, up to
# 2 s each and a warning without internet. Set here, at import, while the process has no
# other threads yet (setenv next to a thread calling getenv is unsafe in C); a value already
# in the environment is kept.
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from framework import registry  # noqa: E402,F401

# The Python API (framework/api): `framework.load(...)` imports torch only when called.
API = ("Model", "load", "train", "evaluate")
SUBPACKAGES = ("analysis", "checkpoint", "config", "data", "dist", "engine", "inference", "losses", "metrics", "models",
               "optim", "tasks", "visualization", "api")


def __getattr__(name: str):
    if name in SUBPACKAGES:  # `framework.models.UNet` after a bare `import framework`
        return importlib.import_module(f"framework.{name}")
    if name in API:
        return getattr(importlib.import_module("framework.api"), name)
    raise AttributeError(f"module 'framework' has no attribute {name!r}")

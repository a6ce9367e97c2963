"""A config-driven PyTorch training framework for semantic segmentation and GANs.

`import framework` is cheap: it imports neither torch nor albumentations. Each registry imports
its built-in components on its first lookup (see `Registry.add_source` in framework/registry.py),
so the tools read and validate a config before paying for torch, and `framework.models`,
`framework.data`, ... are imported on first attribute access.
"""

import importlib

__version__ = "0.2.0"

from framework import registry  # noqa: E402,F401

SUBPACKAGES = ("analysis", "data", "engine", "inference", "losses", "metrics", "models", "tasks", "visualization")


def __getattr__(name: str):
    if name in SUBPACKAGES:  # `framework.models.UNet` after a bare `import framework`
        return importlib.import_module(f"framework.{name}")
    raise AttributeError(f"module 'framework' has no attribute {name!r}")

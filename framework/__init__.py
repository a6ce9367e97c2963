"""A config-driven PyTorch training framework for semantic segmentation and GANs.

Importing `framework` fills every registry with the built-in components.
"""

__version__ = "0.2.0"

from framework import (  # noqa: E402,F401
    data,
    engine,
    losses,
    metrics,
    models,
    registry,  # noqa: E402,F401
    tasks,
)

"""A config-driven PyTorch training framework for semantic segmentation and GANs.

Importing `framework` fills every registry with the built-in components.
"""

__version__ = "0.1.0"

from framework import registry  # noqa: E402,F401
from framework import data, engine, losses, metrics, models, tasks  # noqa: E402,F401

"""Trainer loop, hooks, optimizers and schedules, checkpoint I/O, distributed helpers."""

from framework.engine import frozen_start, hooks, optim, schedulers  # noqa: F401  (fill the registries)

"""Trainer loop, hooks, optimizers and schedules, checkpoint I/O, distributed helpers.

Nothing is imported here: `framework.engine.cli` (what the tools load before the config is
validated) must not pull in torch. The registries import hooks, optimizers and schedulers on
their first lookup (framework/registry.py)."""

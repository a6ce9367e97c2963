"""A trained task from a config and a checkpoint, as the inference tools (infer, export,
analyze_model) load it."""

from __future__ import annotations

import torch

from framework.checkpoint import files as ckpt
from framework.config import import_custom_modules, load_config, to_plain
from framework.engine import network_settings  # noqa: F401  (model nodes may carry init/frozen/norm_eval)
from framework.engine.nonfinite import refuse_nonfinite_weights
from framework.registry import TASKS


def load_trained_task(config: str, checkpoint: str | None, overrides=(), device: torch.device | None = None):
    """(task in eval mode on `device`, resolved plain config). Without a checkpoint the task keeps
    its initial weights (useful to analyse or export an untrained network)."""
    cfg = load_config(config, list(overrides))
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    torch.manual_seed(plain["seed"])  # without a checkpoint: the same initial weights every time
    task = TASKS.build(plain["task"], path="task")
    if checkpoint is not None:
        state = ckpt.load_checkpoint(checkpoint)  # a training checkpoint, read with weights_only
        refuse_nonfinite_weights(state["task"], str(checkpoint))  # as tools/test.py: no masks from NaN
        ckpt.load_task_weights(task, state, checkpoint)
    return task.to(device or torch.device("cpu")).eval(), plain

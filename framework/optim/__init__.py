"""Optimisation: the optimizers by name, learning-rate schedules and parameter groups.

Owns: `Optimizers` (`optimizers.py`: the one object a task updates its networks through:
zero_grad, backward, GradScaler, accumulation, clipping, the non-finite skip policy),
`build_optimizers`, which optimizer trains which parameter (`ownership.py`: each trainable
parameter exactly one), the schedulers and closed-form warmup schedules (`schedulers.py`), and
`param_groups` with `lr_mult` (`param_groups.py`), and which optimizers run torch's fused
kernel (`fused.py`).
May import: registry, errors and `framework.dist` (reductions); never the engine.
Importing `framework.optim.optimizers` registers torch's optimizers in `OPTIMIZERS`.
"""

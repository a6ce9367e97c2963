"""Non-finite training (NaN/inf losses or weights) is stopped, never saved.

`train.nan_policy`:
- raise (default): the loss terms of every iteration are watched on the device, without a
  host sync: each term's first non-finite iteration is kept in a tensor. `check()` reads it
  (one sync) whenever something is about to be logged, evaluated or saved, and at the end;
  then the run stops with the iteration and the terms named. Nothing is written from the
  diverged weights: checkpoints, `best.pth` and metric records before it stay.
- skip: each optimizer step whose loss is not finite is skipped (decided on every rank at
  once, one sync per step, as float16's GradScaler does), counted and logged; more than
  `train.nan_max_skips` consecutive skipped iterations raise.

Weights are checked directly (`nonfinite_tensors`) before a checkpoint or an evaluation and
when tools/test.py loads one, so a divergence that no loss showed is refused too.
"""

from __future__ import annotations

import torch

from framework.engine.dist import all_reduce_min
from framework.errors import NonFiniteError

_NONE = torch.iinfo(torch.int64).max  # "no non-finite value seen", so that MIN picks the first


class NonFiniteGuard:
    def __init__(self, policy: str = "raise", max_skips: int = 10):
        self.policy = policy
        self.max_skips = max_skips
        # {term names: int64 tensor of each term's first non-finite iteration (or _NONE)}
        self._first_bad: dict[tuple[str, ...], torch.Tensor] = {}
        self._unchecked = False

    def observe(self, iteration: int, logs: dict) -> None:
        """Record which logged terms are not finite at `iteration` (device ops, no sync)."""
        if self.policy != "raise" or not logs:
            return
        names = tuple(logs)
        values = torch.stack([torch.as_tensor(v).detach().float().reshape(()) for v in logs.values()])
        first = self._first_bad.get(names)
        if first is None:
            first = torch.full((len(names),), _NONE, dtype=torch.int64, device=values.device)
        self._first_bad[names] = torch.where(torch.isfinite(values) | (first != _NONE), first, iteration)
        self._unchecked = True

    def check(self, iteration: int, skipped_steps: int = 0) -> None:
        """Raise NonFiniteError when a term was not finite (call on every rank: a collective)."""
        if not self._unchecked:
            return
        self._unchecked = False
        local = torch.cat([first for first in self._first_bad.values()]).min()
        first = int(all_reduce_min(local.clone()).item())
        if first == _NONE:
            return
        terms = sorted({name for names, firsts in self._first_bad.items()
                        for name, at in zip(names, firsts.tolist()) if at == first})
        where = ", ".join(terms) if terms else "a loss on another process"
        raise NonFiniteError(
            f"training diverged: {where} not finite at iteration {first} (stopped at iteration {iteration}; "
            f"checkpoints and best.pth from before it are kept). Lower optim.lr, set optim.clip_grad, "
            f"check the data, or set train.nan_policy=skip to skip such steps")


def nonfinite_tensors(state: dict, limit: int = 3) -> list[str]:
    """Names of the (first `limit`) floating-point tensors of a state dict holding NaN or inf."""
    names = [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if not names:
        return []
    finite = torch.stack([torch.isfinite(state[k]).all() for k in names]).tolist()  # one sync
    return [k for k, ok in zip(names, finite) if not ok][:limit]


def refuse_nonfinite_weights(state: dict, what: str) -> None:
    bad = nonfinite_tensors(state)
    if bad:
        raise NonFiniteError(f"{what}: the weights are not finite (NaN or inf in {', '.join(bad)}); "
                             "the training that produced them diverged")

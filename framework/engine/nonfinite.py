"""Non-finite training (NaN/inf losses or weights) is stopped, never saved.

`train.nan_policy`:
- raise (default): the logged loss terms of every iteration (already detached tensors) are
  kept as they are, with no device work and no host sync per step. `check()` stacks them and
  reads which were finite (one sync, and one agreement across ranks) whenever something is
  about to be logged, evaluated or saved, at the end, and at least every 1000 iterations;
  a non-finite term stops the run, naming its first iteration and the terms. Nothing is written from the
  diverged weights: checkpoints, `best.pth` and metric records before it stay.
- skip: each optimizer step whose loss is not finite is skipped (decided on every rank at
  once, one sync per step, as float16's GradScaler does), counted and logged; more than
  `train.nan_max_skips` consecutive skipped iterations raise.

Weights are checked directly (`nonfinite_tensors`) before a checkpoint or an evaluation and
when tools/test.py loads one, so a divergence that no loss showed is refused too.
"""

from __future__ import annotations

import torch

from framework.dist import all_reduce_min
from framework.errors import NonFiniteError

_NONE = torch.iinfo(torch.int64).max  # "no non-finite value seen", so that MIN picks the first


class NonFiniteGuard:
    # A check is forced after this many unchecked iterations (a run that never logs, evaluates
    # or saves would otherwise keep every iteration's logs).
    MAX_PENDING = 1000

    def __init__(self, policy: str = "raise"):
        self.policy = policy
        self._pending: list[tuple[int, dict]] = []  # (iteration, its logs), since the last check
        self._error: NonFiniteError | None = None

    def observe(self, iteration: int, logs: dict) -> None:
        """Keep the iteration's logged terms (detached device tensors) for the next check: no
        device work and no sync per step."""
        if self.policy == "raise" and logs:
            self._pending.append((iteration, dict(logs)))
            if len(self._pending) >= self.MAX_PENDING:
                self.check(iteration)

    def check(self, iteration: int) -> None:
        """Raise NonFiniteError when a term was not finite (call on every rank: a collective)."""
        if self._error is not None:
            raise self._error
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        entries = [(it, key, value) for it, logs in pending for key, value in logs.items()]
        values = torch.stack([v if isinstance(v, torch.Tensor) else torch.tensor(float(v)) for _, _, v in entries])
        finite = torch.isfinite(values.float().reshape(-1)).tolist()  # device -> host once
        bad = [(it, key) for (it, key, _), ok in zip(entries, finite) if not ok]
        local_first = min((it for it, _ in bad), default=_NONE)
        first = int(all_reduce_min(torch.tensor(local_first, device=values.device)).item())  # ranks agree
        if first == _NONE:
            return
        terms = sorted({key for it, key in bad if it == first})
        where = ", ".join(terms) if terms else "a loss on another process"
        self._error = NonFiniteError(
            f"training diverged: {where} not finite at iteration {first} (stopped at iteration {iteration}; "
            f"checkpoints and best.pth from before it are kept). Lower optim.lr, set optim.clip_grad, "
            f"check the data, or set train.nan_policy=skip to skip such steps")
        raise self._error


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

"""Seeding and the random generator states a checkpoint carries (python, numpy, torch, CUDA).

States are stored as tensors, ints and lists, so a checkpoint holding them loads with
`weights_only=True`.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from framework.dist import get_rank


def seed_everything(seed: int, deterministic: bool | str = False) -> None:
    """Seed python, numpy and torch, offset by rank so processes do not draw the same numbers,
    and set torch's deterministic mode for `deterministic`:
    - true: deterministic algorithms only; torch raises at an operation that has none (on CUDA,
      e.g. the backward of bilinear upsampling or adaptive average pooling);
    - "warn": the same, but such an operation runs its nondeterministic kernel with a warning
      naming it (the run trains; it is exact except for those operations);
    - false: torch's defaults.
    The mode is set either way, so a second run in the same process (a notebook, a test) does
    not keep the first one's."""
    seed = seed + get_rank()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
    torch.backends.cudnn.deterministic = bool(deterministic)


def rng_state() -> dict:
    """This process's generator states."""
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": torch.from_numpy(keys.astype(np.int64)),
        "numpy_pos": int(pos),
        "numpy_gauss": [int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    has_gauss, gauss = state["numpy_gauss"]
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_pos"],
                         int(has_gauss), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

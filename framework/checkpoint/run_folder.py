"""The run folder's layout: the one place that knows where a run's checkpoints are, how they are
named, which one to resume and whether a folder holds a run at all.

    <work_dir>/checkpoints/
        iter_<N>.pth   the state after N iterations (one per train.ckpt_interval, at the end, on a stop)
        latest         a text file naming the newest complete iter_<N>.pth
        best.pth       the best by train.best_metric, kept apart from the rotation

The checkpoint hook (what is saved when), resume (which file) and the work-dir lock (whether a
new run may start here) all ask this module; nothing else builds these names.

A run is what training produced: a checkpoint of at least one iteration. `iter_0.pth` alone,
the untrained start (framework 0.2 saved it when the evaluation before the first iteration
failed), is no run: nothing to continue, nothing to protect.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

logger = logging.getLogger("framework")

CHECKPOINTS = "checkpoints"
LATEST = "latest"
BEST = "best.pth"
_ITER_NAME = re.compile(r"^iter_(\d+)\.pth$")


def checkpoint_folder(work_dir: str | os.PathLike) -> Path:
    return Path(work_dir) / CHECKPOINTS


def best_path(work_dir: str | os.PathLike) -> Path:
    return checkpoint_folder(work_dir) / BEST


def iteration_name(iteration: int) -> str:
    """The file name of the checkpoint after `iteration` iterations: iter_<N>.pth."""
    return f"iter_{iteration}.pth"


def iteration_of(path: str | os.PathLike) -> int | None:
    """N of an iter_<N>.pth path (None for any other name, best.pth included)."""
    match = _ITER_NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def iteration_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """iter_<N>.pth files in `folder` (a checkpoints folder), oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(n, p) for p in folder.iterdir() if (n := iteration_of(p)) is not None]
    return [p for _, p in sorted(found)]


def run_checkpoints(work_dir: str | os.PathLike) -> list[str]:
    """The checkpoints that show `work_dir` holds a run (names, at most 3; empty when none):
    every .pth in its checkpoints folder but the untrained start (iter_0.pth)."""
    folder = checkpoint_folder(work_dir)
    if not folder.is_dir():
        return []
    return [p.name for p in sorted(folder.glob("*.pth")) if iteration_of(p) != 0][:3]


def holds_run(work_dir: str | os.PathLike) -> bool:
    return bool(run_checkpoints(work_dir))


def untrained_start(work_dir: str | os.PathLike) -> Path | None:
    """iter_0.pth when it is the only checkpoint of `work_dir` (no run: see the module docstring)."""
    path = checkpoint_folder(work_dir) / iteration_name(0)
    return path if path.is_file() and not holds_run(work_dir) else None


def read_latest(folder: str | os.PathLike) -> Path | None:
    """The checkpoint `latest` names; None when there is no pointer or it is damaged."""
    pointer = Path(folder) / LATEST
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_bytes().decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        name = None
    if not name or iteration_of(name) is None:  # damaged: the iteration checkpoints are tried instead
        logger.warning(f"warning: {pointer} does not name a checkpoint (iter_<N>.pth); ignoring it")
        return None
    return Path(folder) / name


def resume_candidates(folder: str | os.PathLike) -> list[Path]:
    """Checkpoints to resume from, in order of preference: the one `latest` names, then the
    other iteration checkpoints, newest first."""
    latest = read_latest(folder)
    others = [p for p in reversed(iteration_checkpoints(folder)) if p != latest]
    return ([latest] if latest is not None else []) + others

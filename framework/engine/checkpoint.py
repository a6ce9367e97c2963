"""Checkpoint files: atomic writes, safe reads, the `latest` pointer and retention.

Layout of `<work_dir>/checkpoints/`:
    iter_<N>.pth   one per ckpt_interval (the last `keep_last` are kept)
    latest         a text file naming the newest complete iter_<N>.pth
    best.pth       the best by train.best_metric, kept apart from the rotation

Writes go to a temp file in the same folder, are fsynced, then renamed over the final name,
so a crash never leaves a partial file at a final path. Reads use
`torch.load(weights_only=True)`: a file that would need arbitrary unpickling is refused,
never executed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from framework.errors import CheckpointError

LATEST = "latest"
_ITER_NAME = re.compile(r"^iter_(\d+)\.pth$")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, write) -> None:
    """Call `write(file_object)` into a temp file, fsync, and rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def save_checkpoint(state: dict, path: str | os.PathLike) -> None:
    atomic_write_bytes(Path(path), lambda f: torch.save(state, f))


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint to CPU without running any code stored in it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every failure becomes one clear message
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "weights_only" in str(err) or "Unsupported global" in str(err):
            reason = ("it contains pickled objects that are not plain tensors/containers "
                      "(refused: loading it could run code)")
        raise CheckpointError(f"cannot load checkpoint {path}: {reason}") from err
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(state).__name__}, expected a dict")
    return state


def iteration_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """iter_<N>.pth files in `folder`, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _ITER_NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def write_latest(folder: Path, name: str) -> None:
    atomic_write_bytes(folder / LATEST, lambda f: f.write(name.encode()))


def read_latest(folder: str | os.PathLike) -> Path | None:
    pointer = Path(folder) / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    return Path(folder) / name if name else None


def prune(folder: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` iteration checkpoints (never best.pth)."""
    if keep_last <= 0:
        return
    for old in iteration_checkpoints(folder)[:-keep_last]:
        old.unlink(missing_ok=True)

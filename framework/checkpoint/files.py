"""Checkpoint files: atomic writes, safe reads, the `latest` pointer, retention and resume.

Where they are and how they are named is run_folder.py's (`<work_dir>/checkpoints/iter_<N>.pth`,
`latest`, `best.pth`); this module reads and writes them.

Writes go to a temp file in the same folder, are fsynced, then renamed over the final name,
and `latest` is rewritten (the same way) only after that: a crash never leaves a partial file
at a final path, and `latest` always names a complete file. Reads go through
framework.serialization (`torch.load(weights_only=True)` or safetensors): a file that would need
arbitrary unpickling is refused, never executed, and there is no fallback to unsafe loading.
"""

from __future__ import annotations

import copy
import logging
import os
import re
from pathlib import Path

import torch

# read_latest also answers here, where it lived before 0.3.0.
from framework.checkpoint.run_folder import (  # noqa: F401
    LATEST,
    iteration_checkpoints,
    iteration_of,
    read_latest,
    resume_candidates,
)
from framework.errors import CheckpointError
from framework.serialization.weights_file import UnsafeCheckpointError, read_weights_file

logger = logging.getLogger("framework")

TRAINING_CHECKPOINT_KEYS = ("meta", "task", "optim", "rng")
_TEMP_NAME = re.compile(r"^\..+\.tmp-(\d+)$")


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


def remove_stale_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Delete temp files left by writers that were killed mid-write (their process is gone)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for path in folder.iterdir():
        match = _TEMP_NAME.match(path.name)
        if match and not process_alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class _WriteErrors:
    """A file object that remembers the OSError of a failed write: torch's zip writer turns it
    into a RuntimeError about file positions, which says nothing about the disk."""

    def __init__(self, file):
        self.file = file
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.file.flush()


def on_cpu(obj):
    """`obj` (nested dicts, lists, tuples) with every tensor moved to the CPU: a checkpoint of a
    run on a GPU loads with a plain `torch.load` on a machine without one (torch would otherwise
    restore each tensor to the device it was saved from). Loading puts them back on the run's
    device (`load_state_dict` copies into the parameters; optimizers move their state to their
    parameters' device). Not engine's `move_to_device`: that one copies asynchronously and
    rebuilds dicts as plain ones, losing a state_dict's `_metadata`."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()  # the tensor itself when it is on the CPU already: no copy
    if isinstance(obj, dict):
        moved = copy.copy(obj)  # keeps the type and attributes (a state_dict's `_metadata`: layer versions)
        for key, value in obj.items():
            moved[key] = on_cpu(value)
        return moved
    if isinstance(obj, list):
        return [on_cpu(value) for value in obj]
    if isinstance(obj, tuple):
        values = [on_cpu(value) for value in obj]
        return type(obj)(*values) if hasattr(obj, "_fields") else tuple(values)
    return obj


def save_checkpoint(state: dict, path: str | os.PathLike) -> None:
    """Write `state` atomically, every tensor on the CPU (`on_cpu`). A file-system failure (a full
    disk, a lost mount) is an OSError naming `path` (`error: <path>: No space left on device`, exit
    status 1); the previous checkpoint and `latest` are intact."""
    state = on_cpu(state)

    def write(f) -> None:
        recorder = _WriteErrors(f)
        try:
            torch.save(state, recorder)
        except RuntimeError as err:
            if recorder.error is None:
                raise
            raise recorder.error from err

    try:
        atomic_write_bytes(Path(path), write)
    except OSError as err:
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A training checkpoint (meta, task, optim, rng) read to the CPU without running code from it."""
    state = read_weights_file(path)
    absent = [k for k in TRAINING_CHECKPOINT_KEYS if k not in state]
    if absent:
        raise CheckpointError(f"{path} is not a training checkpoint of this framework "
                              f"(it has no {', '.join(absent)}); use load_from for weights")
    return state


def load_task_weights(task, state: dict, path: str | os.PathLike) -> None:
    """Load a training checkpoint's task weights; one line when they belong to another config."""
    try:
        task.load_state_dict(state["task"])
    except (KeyError, ValueError, RuntimeError) as err:  # other networks, widths or number of classes
        reason = " ".join(str(err).split())
        raise CheckpointError(f"{path} does not fit this config's task: {reason[:300]}") from err


def write_latest(folder: Path, name: str) -> None:
    atomic_write_bytes(folder / LATEST, lambda f: f.write(name.encode()))


def load_latest_checkpoint(folder: str | os.PathLike) -> tuple[Path, dict] | None:
    """(path, state) of the newest readable checkpoint in `folder`, None when it has none.

    An unreadable one (truncated, corrupt, missing) is skipped with a warning naming it; a
    refused one (unsafe pickle) is an error: it was not written by this framework.
    """
    candidates = resume_candidates(folder)
    for i, path in enumerate(candidates):
        try:
            return path, load_checkpoint(path)
        except UnsafeCheckpointError:
            raise
        except CheckpointError as err:
            following = f"trying {candidates[i + 1].name}" if i + 1 < len(candidates) else "no older one left"
            logger.warning(f"warning: skipping unreadable checkpoint: {err}; {following}")
    if candidates:
        raise CheckpointError(f"no readable checkpoint in {folder} (tried {', '.join(p.name for p in candidates)})")
    return None


def prune(folder: Path, keep_last: int, current_iter: int | None = None) -> None:
    """Delete all but the newest `keep_last` iteration checkpoints (never best.pth).

    A run resumed from an older checkpoint finds the abandoned trajectory's later checkpoints
    (iterations past `current_iter`): they count as the oldest, so retention deletes them
    before any of the run's own new ones."""
    if keep_last <= 0:
        return
    found = iteration_checkpoints(folder)
    if current_iter is not None:
        abandoned = [p for p in found if iteration_of(p) > current_iter]
        found = abandoned + [p for p in found if p not in abandoned]
    for old in found[:-keep_last]:
        old.unlink(missing_ok=True)

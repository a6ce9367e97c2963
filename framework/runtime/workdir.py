"""A work dir belongs to one run: a new run never mixes into an old one, two runs never share one.

    with claim_work_dir(path, resuming=..., overwrite=...):
        train

- A work dir that holds a run (checkpoints; framework/checkpoint/run_folder.py decides) is
  refused unless the run resumes it (`--resume`, auto_resume) or `--overwrite` moves it aside
  first, to `<path>.old-<time>`; nothing of the old run is deleted. What a run that never saved a
  trained checkpoint left (metrics.jsonl, TensorBoard events, the untrained start iter_0.pth) is
  no run to protect: it is moved aside the same way, with a notice.
- `<path>/.lock` holds the owner's pid and host while a run uses the folder. A second run
  refuses to start; a lock whose process is gone (same host) is stale and taken over, and so is
  a lock of the same Slurm job before it was requeued (SLURM_JOB_ID, SLURM_RESTART_COUNT).
- The folder must be writable: creating the lock is the check, before any other file (an
  OSError naming the folder: exit status 1).

Only the main process (rank 0) claims; the others write nothing there.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
from contextlib import contextmanager
from pathlib import Path

from framework.checkpoint.files import process_alive
from framework.checkpoint.run_folder import CHECKPOINTS, run_checkpoints, untrained_start
from framework.errors import ConfigError

logger = logging.getLogger("framework")

LOCK_FILE = ".lock"


def leftover_files(work_dir: Path) -> list[str]:
    """What a run that never saved a trained checkpoint left (nothing to resume, but not to mix into)."""
    start = untrained_start(work_dir)
    found = [f"{CHECKPOINTS}/{start.name} (the untrained start)"] if start is not None else []
    if (work_dir / "metrics.jsonl").is_file():
        found.append("metrics.jsonl")
    if any((work_dir / "tensorboard").glob("events.out.tfevents.*")):
        found.append("tensorboard events")
    return found


@contextmanager
def claim_work_dir(work_dir: str | os.PathLike, resuming: bool, overwrite: bool = False, main_process: bool = True):
    """Own `work_dir` for the duration of the block (see the module docstring). Yields the
    notices to log once the work dir's log file is open (moved folders, a stale lock)."""
    if not main_process:
        yield []
        return
    work_dir = Path(work_dir)
    notices: list[str] = []
    _refuse_if_locked(work_dir)  # a live run's folder: nothing else to say
    run = run_checkpoints(work_dir)
    if overwrite and work_dir.exists() and (run or leftover_files(work_dir)):
        notices.append(f"--overwrite: moved the previous run in {work_dir} to {_move_aside(work_dir)}")
    elif not resuming and run:
        raise ConfigError(
            f"work dir {work_dir} holds a run ({', '.join(run)}): continue it with --resume, "
            "start a new one with another --work-dir, or pass --overwrite to move the old run aside")
    elif not run and leftover_files(work_dir):
        # A run that stopped before its first trained checkpoint (e.g. a config mistake found
        # late): nothing to resume or protect, but its records must not mix into this run's.
        aside = _move_aside(work_dir)
        notices.append(f"moved {', '.join(leftover_files(aside))} of a run without a trained checkpoint in {work_dir} "
                       f"to {aside}")
    lock, stale = _acquire(work_dir)
    if stale:
        notices.append(f"removed a stale lock in {work_dir} (its process is gone)")
    for notice in notices:
        logger.info(notice)  # on the console now; tools/train.py logs them again into train.log
    try:
        yield notices
    finally:
        lock.unlink(missing_ok=True)


def _move_aside(work_dir: Path) -> Path:
    aside = work_dir.with_name(f"{work_dir.name}.old-{datetime.datetime.now():%Y%m%d-%H%M%S-%f}")
    work_dir.rename(aside)
    return aside


def _acquire(work_dir: Path) -> tuple[Path, bool]:
    """(the lock file, whether a stale lock was taken over). An unwritable folder is an OSError
    naming it: `error: <path>: <cause>`, exit status 1, as in every tool."""
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(work_dir)) from err
    lock = work_dir / LOCK_FILE
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": datetime.datetime.now().isoformat()}
    if os.environ.get("SLURM_JOB_ID"):
        owner["slurm_job"] = os.environ["SLURM_JOB_ID"]
        owner["slurm_restart"] = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    stale = False
    for _ in range(2):
        try:
            with open(lock, "x", encoding="utf-8") as f:
                json.dump(owner, f)
            return lock, stale
        except FileExistsError:
            _refuse_if_locked(work_dir)
            lock.unlink(missing_ok=True)  # stale: its process is gone
            stale = True
    raise ConfigError(f"work dir {work_dir}: another run took the lock while this one started")


def _refuse_if_locked(work_dir: Path) -> None:
    """Raise when a live run holds `work_dir`; return when it is free or the lock is stale."""
    lock = work_dir / LOCK_FILE
    try:
        owner = json.loads(lock.read_text(encoding="utf-8"))
        pid, host = int(owner["pid"]), str(owner["host"])
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):
        return  # unreadable: a lock left half-written by a killed process
    if _earlier_attempt_of_this_slurm_job(owner):
        return  # Slurm runs one attempt of a job at a time: a requeued job takes its own lock over
    if host != socket.gethostname():
        raise ConfigError(f"work dir {work_dir} is in use by pid {pid} on host {host} (since {owner.get('started')}); "
                          f"if that run is gone, delete {lock}")
    if pid != os.getpid() and process_alive(pid):
        raise ConfigError(f"work dir {work_dir} is in use by another run (pid {pid}, since {owner.get('started')})")


def _earlier_attempt_of_this_slurm_job(owner: dict) -> bool:
    """The lock was left by this Slurm job before it was requeued (possibly on another node)."""
    job, restart = os.environ.get("SLURM_JOB_ID"), int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    return bool(job) and owner.get("slurm_job") == job and int(owner.get("slurm_restart", 0)) < restart

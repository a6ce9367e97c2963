"""Which checkpoint a run resumes from, and resuming it with a clear line when it does not fit.

A run resumed on another number of processes keeps its global batch (processes x batch per
process x accumulate): `accumulate_on_resume` changes train.accumulate when that divides, and
refuses otherwise unless told `--allow-new-world-size`. The data continue at the same sample of
the epoch (the checkpoint counts samples, not one rank's batches: TrainData), and ranks that
have no random state of their own in the file start from a fresh seeded one, said in one line.
Checkpoints written before 0.3.0 record no world size: they resume as written by this one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from framework.checkpoint import files as ckpt
from framework.checkpoint import run_folder
from framework.dist import get_rank, get_world_size
from framework.errors import CheckpointError

logger = logging.getLogger("framework")

# Settings about where and how a run was launched, not what it trains: not worth a warning.
LAUNCH_KEYS = ("work_dir", "auto_resume")


def auto_resume_enabled(setting) -> bool:
    """`auto_resume`: true, false, or auto (on when torchrun restarted the worker group, or
    Slurm restarted a requeued job: SLURM_RESTART_COUNT > 0)."""
    if setting == "auto":
        restarts = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
        return any(int(os.environ.get(name, "0") or 0) > 0 for name in restarts)
    return bool(setting)


def checkpoint_to_resume(work_dir: str, resume: str | bool | tuple | None, auto_resume) -> tuple[Path, dict] | None:
    """(path, state) to resume from: `--resume PATH`, `--resume` (the work dir's latest readable
    checkpoint, else an error), or with auto_resume the latest if the work dir holds a run; else
    None. The untrained start alone (iter_0.pth) is no run (framework/checkpoint/run_folder.py)."""
    if isinstance(resume, tuple):  # (path, state) read already (api/runs.py, before the work dir is claimed)
        return resume
    if isinstance(resume, (str, os.PathLike)):
        return Path(resume), ckpt.load_checkpoint(resume)
    if resume:
        require_run_to_resume(work_dir)
    elif not (auto_resume_enabled(auto_resume) and run_folder.holds_run(work_dir)):
        return None
    found = ckpt.load_latest_checkpoint(run_folder.checkpoint_folder(work_dir))
    if found is None and resume:  # e.g. best.pth alone: a run, but no iteration to continue from
        raise CheckpointError(f"--resume: no checkpoint to resume from in {run_folder.checkpoint_folder(work_dir)}")
    return found


def require_run_to_resume(work_dir: str | os.PathLike) -> None:
    """`--resume` without a path: one line, before anything is written, when `work_dir` holds no
    run to continue (tools/train.py asks before claiming the work dir)."""
    folder = run_folder.checkpoint_folder(work_dir)
    if run_folder.holds_run(work_dir):
        return
    start = run_folder.untrained_start(work_dir)
    if start is not None:
        raise CheckpointError(f"--resume: {start} is the untrained start (saved before the first iteration), "
                              "nothing to continue: train without --resume")
    raise CheckpointError(f"--resume: no checkpoint to resume from in {folder}")


def config_changes(saved_yaml: str, current: dict, limit: int = 5) -> str:
    """'key: old -> new' for the first `limit` training settings that differ between two configs."""
    def flat(node, prefix=""):
        if isinstance(node, dict):
            return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix[:-1]: node}

    saved, now = flat(yaml.safe_load(saved_yaml) or {}), flat(current)
    for key in LAUNCH_KEYS:
        saved.pop(key, None), now.pop(key, None)
    changed = [f"{k}: {saved.get(k, '<absent>')} -> {now.get(k, '<absent>')}"
               for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
    more = f" (and {len(changed) - limit} more)" if len(changed) > limit else ""
    return "; ".join(changed[:limit]) + more


def resume_trainer(trainer, path: Path, state: dict, current_config: dict) -> None:
    meta = state.get("meta", {})
    try:
        trainer.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError) as err:  # a checkpoint of another model or optimizer setup
        reason = " ".join(str(err).split())[:300]
        written_by = f"written by framework {meta.get('framework_version', '?')}"
        raise CheckpointError(f"{path} does not fit this config's task/optimizers ({written_by}): {reason}") from err
    changes = config_changes(meta.get("config", ""), current_config)
    if changes:
        logger.warning(f"warning: resuming with a config that differs from the checkpoint's: {changes}. "
                       "Optimizer and scheduler states continue as saved; a schedule's max_iters follows the config")
    logger.info(f"resumed from {path} at iteration {trainer.iter} (epoch {trainer.epoch}, "
                f"{trainer.data.batches_in_epoch} batches into it)")


def accumulate_on_resume(path: Path, state: dict, world_size: int, batch_size: int, accumulate: int,
                         allow_new_world_size: bool = False) -> int:
    """train.accumulate for resuming `state` on `world_size` processes of `batch_size`: the one
    that keeps the checkpoint's global batch when the world size changed, else `accumulate`."""
    meta = state["meta"]
    saved_world = meta.get("world_size", world_size)  # files before 0.3.0: the same world size
    if saved_world == world_size:
        return accumulate
    global_batch, per_micro_step = meta["global_batch"], world_size * batch_size
    written = (f"{_processes(saved_world)} x batch {meta['batch_size']} x accumulate {meta['accumulate']} "
               f"= {global_batch}")
    if global_batch % per_micro_step == 0:
        kept = global_batch // per_micro_step
        logger.info(f"resuming a {saved_world}-process run on {_processes(world_size)}: train.accumulate {kept} "
                    f"(the config says {accumulate}) keeps its global batch ({written}; now {world_size} x "
                    f"batch {batch_size} x {kept}); the data continue at sample {meta.get('samples_in_epoch')} "
                    f"of epoch {meta['epoch']}")
        return kept
    now = per_micro_step * accumulate
    if not allow_new_world_size:
        raise CheckpointError(
            f"{path}: the run's global batch ({written}) cannot be kept on {_processes(world_size)} of batch "
            f"{batch_size}: {global_batch} is not a multiple of {world_size} x {batch_size} = {per_micro_step}. "
            f"Resume on a number of processes that divides it, change data.train.batch_size, or pass "
            f"--allow-new-world-size to continue with a global batch of {now} "
            f"({world_size} x {batch_size} x accumulate {accumulate})")
    logger.warning(f"warning: --allow-new-world-size: the global batch changes from {global_batch} ({written}) "
                   f"to {now} ({world_size} x {batch_size} x accumulate {accumulate}); the learning rate and "
                   "schedule stay as they were")
    return accumulate


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def log_ranks_without_state(state: dict, task_has_rank_state: bool, task_name: str) -> None:
    """One line (rank 0's) when ranks of this run have no state of their own in the checkpoint:
    a run resumed on more processes than wrote it. Those ranks keep the fresh seeded random state
    (seed + rank) and, for a task with per-rank state, start it afresh."""
    world_size = get_world_size()
    recorded = sorted(state["rng"])
    saved = state["meta"].get("world_size", len(recorded))
    missing = [r for r in range(world_size) if r not in state["rng"]]
    unused = [r for r in recorded if r >= world_size]
    if unused and get_rank() == 0:
        logger.info(f"resuming a {saved}-process run on {_processes(world_size)}: the recorded states of "
                    f"rank(s) {', '.join(map(str, unused))} are not used")
    if missing and get_rank() == 0:
        what = f"random state and {task_name} state (e.g. an image pool)" if task_has_rank_state else "random state"
        logger.info(f"resuming a {saved}-process run on {_processes(world_size)}: rank(s) "
                    f"{', '.join(map(str, missing))} have no recorded {what} and start from a fresh seeded one "
                    f"(seed + rank); rank(s) {', '.join(map(str, recorded))} continue theirs")

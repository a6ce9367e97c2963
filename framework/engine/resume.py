"""Which checkpoint a run resumes from, and resuming it with a clear line when it does not fit."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from framework.checkpoint import files as ckpt
from framework.checkpoint import run_folder
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


def checkpoint_to_resume(work_dir: str, resume: str | bool | None, auto_resume) -> tuple[Path, dict] | None:
    """(path, state) to resume from: `--resume PATH`, `--resume` (the work dir's latest readable
    checkpoint, else an error), or with auto_resume the latest if the work dir holds a run; else
    None. The untrained start alone (iter_0.pth) is no run (framework/checkpoint/run_folder.py)."""
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

"""From a validated config to a running Trainer (and the pieces tools/test.py reuses)."""

from __future__ import annotations

import logging
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from framework.config import import_custom_modules, save_config, to_plain
from framework.data.loader import build_dataloader
from framework.engine import checkpoint as ckpt
from framework.engine import pretrained
from framework.engine.compile import compile_networks
from framework.engine.dist import get_rank, get_world_size, init_distributed, is_main, wrap_networks
from framework.engine.hooks import CheckpointHook, EvalHook, LoggerHook, LRSchedulerHook
from framework.engine.optim import build_optimizers
from framework.engine.sync_bn import convert_sync_batchnorm
from framework.engine.trainer import Trainer
from framework.errors import CheckpointError, ConfigError
from framework.registry import HOOKS, METRICS, TASKS

logger = logging.getLogger("framework")


def setup_logging(work_dir: str | None = None, filename: str = "train.log") -> None:
    """Console (and `<work_dir>/<filename>`) logging on rank 0; warnings only elsewhere."""
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.INFO if is_main() else logging.WARNING)
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(fmt)
    logger.addHandler(console)
    if work_dir and is_main():
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        file = logging.FileHandler(Path(work_dir) / filename, encoding="utf-8")
        file.setFormatter(fmt)
        logger.addHandler(file)


def select_device(spec: str = "auto") -> torch.device:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if spec == "auto":
        spec = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise ConfigError(f"device: '{spec}' is not a device (use auto, cpu, cuda or cuda:N)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device: '{spec}' asked for, but CUDA is not available on this machine")
    return device


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed python, numpy and torch, offset by rank so processes do not draw the same numbers."""
    seed = seed + get_rank()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def amp_settings(amp: dict) -> torch.dtype | None:
    """The autocast dtype, or None when AMP is off."""
    if not amp["enabled"]:
        return None
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    if amp["dtype"] not in dtypes:
        raise ConfigError(f"amp.dtype: must be float16 or bfloat16, got {amp['dtype']!r}")
    return dtypes[amp["dtype"]]


def build_task(cfg: dict, device: torch.device):
    return TASKS.build(cfg["task"], path="task").to(device)


def build_metrics(cfg: dict) -> list:
    nodes = cfg.get("metrics") or []
    return [METRICS.build(node, path=f"metrics[{i}]") for i, node in enumerate(nodes)]


def build_hooks(cfg: dict) -> list:
    train = cfg["train"]
    hooks = [
        LoggerHook(interval=train["log_interval"], progress_bar=train["progress_bar"]),
        LRSchedulerHook(),
        EvalHook(interval=train["val_interval"], at_start=train["val_at_start"], num_images=train["vis_images"]),
        CheckpointHook(interval=train["ckpt_interval"], keep_last=train["keep_last"],
                       best_metric=train["best_metric"], best_mode=train["best_mode"]),
    ]
    hooks += [HOOKS.build(node, path=f"hooks[{i}]") for i, node in enumerate(cfg.get("hooks") or [])]
    return hooks


def auto_resume_enabled(setting) -> bool:
    """`auto_resume`: true, false, or auto (on when torchrun restarted the worker group)."""
    if setting == "auto":
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0
    if isinstance(setting, bool):
        return setting
    raise ConfigError(f"auto_resume: must be true, false or auto, got {setting!r}")


def checkpoint_to_resume(work_dir: str, resume: str | bool | None, auto_resume) -> tuple[Path, dict] | None:
    """(path, state) to resume from: `--resume PATH`, `--resume` (the work dir's latest readable
    checkpoint, else an error), or with auto_resume the latest if there is one; else None."""
    if isinstance(resume, (str, os.PathLike)):
        return Path(resume), ckpt.load_checkpoint(resume)
    folder = Path(work_dir) / "checkpoints"
    if resume or auto_resume_enabled(auto_resume):
        found = ckpt.load_latest_checkpoint(folder)
        if found is None and resume:
            raise CheckpointError(f"--resume: no checkpoint to resume from in {folder}")
        return found
    return None


# Settings about where and how a run was launched, not what it trains: not worth a warning.
LAUNCH_KEYS = ("work_dir", "auto_resume")


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


def build_trainer(cfg: DictConfig, work_dir: str, resume: str | bool | None = None,
                  overrides: list[str] | tuple[str, ...] = ()) -> Trainer:
    """Everything a run needs, built from the config.

    `resume`: a checkpoint path, True for the work dir's latest, None to follow `auto_resume`.
    `overrides`: the command line's key=value list, recorded in every checkpoint.
    """
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    init_distributed(plain["dist"]["backend"], plain["dist"]["timeout"])
    device = select_device(plain["device"])
    seed_everything(plain["seed"], plain["deterministic"])
    rank, world_size = get_rank(), get_world_size()
    resume_from = checkpoint_to_resume(work_dir, resume, plain["auto_resume"])

    data = plain["data"]
    if "train" not in data:
        raise ConfigError("data.train: missing (the training loader)")
    train_loader = build_dataloader(data["train"], "data.train", train=True, seed=plain["seed"],
                                    rank=rank, world_size=world_size, device=device)
    val_loader = None
    if data.get("val") is not None:
        val_loader = build_dataloader(data["val"], "data.val", train=False, rank=rank,
                                      world_size=world_size, device=device)

    train = plain["train"]
    accumulate = train["accumulate"]
    if not isinstance(accumulate, int) or accumulate < 1:
        raise ConfigError(f"train.accumulate: must be a positive integer, got {accumulate!r}")
    max_iters = train["max_iters"] or train["max_epochs"] * (len(train_loader) // accumulate)
    task = build_task(plain, device)
    networks = pretrained.configured_networks(task)
    for _, network, settings in networks:
        pretrained.freeze_and_keep_eval(network, settings)  # before the optimizers pick parameters
    if resume_from is None:
        pretrained.load_pretrained(task, plain.get("load_from"), work_dir, write_report=is_main())
    elif plain.get("load_from") or any("init" in settings for _, _, settings in networks):
        logger.info("load_from/init not applied: the checkpoint being resumed holds the weights")
    if plain["sync_bn"]:
        for name, network in task.networks().items():
            setattr(task, name, convert_sync_batchnorm(network, device))
    if plain["channels_last"]:
        task.to(memory_format=torch.channels_last)  # 4-D weights (and the EMA copy) go NHWC
    compile_networks(task.networks(), plain["compile"])  # in place, before DDP wraps them
    amp_dtype = amp_settings(plain["amp"])
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    optim = build_optimizers(plain, task, max_iters, scaler)
    # After loading: DDP starts every rank from rank 0's weights.
    optim.ddp_networks = wrap_networks(task, device, plain["dist"]["find_unused_parameters"],
                                       plain["dist"]["broadcast_buffers"])
    metrics = build_metrics(plain)

    writer = None
    if is_main():
        save_config(cfg, Path(work_dir) / "config.yaml")
        from torch.utils.tensorboard import SummaryWriter

        # A resumed run hides the events logged after its checkpoint: it logs those steps again.
        purge_step = resume_from[1]["meta"]["iter"] + 1 if resume_from is not None else None
        writer = SummaryWriter(str(Path(work_dir) / "tensorboard"), purge_step=purge_step)

    trainer = Trainer(task, optim, train_loader, val_loader, metrics, build_hooks(plain), max_iters,
                      work_dir, device, config_text=OmegaConf.to_yaml(cfg), writer=writer, overrides=overrides,
                      accumulate=accumulate, amp_dtype=amp_dtype)
    if resume_from is not None:
        resume_trainer(trainer, *resume_from, current_config=plain)

    batch = train_loader.batch_size
    params = sum(p.numel() for p in task.parameters())
    trainable = sum(p.numel() for p in task.parameters() if p.requires_grad)
    logger.info(f"work_dir {work_dir}  device {device}  processes {world_size}  batch {batch} per process "
                f"x {accumulate} accumulated = {batch * world_size * accumulate} per step  "
                f"parameters {params / 1e6:.2f}M ({trainable / 1e6:.2f}M trained)  max_iters {max_iters}")
    return trainer


def resume_trainer(trainer: Trainer, path: Path, state: dict, current_config: dict) -> None:
    try:
        trainer.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError) as err:  # a checkpoint of another model or optimizer setup
        reason = " ".join(str(err).split())[:300]
        raise CheckpointError(f"{path} does not fit this config's task/optimizers: {reason}") from err
    changes = config_changes(state["meta"].get("config", ""), current_config)
    if changes:
        logger.warning(f"warning: resuming with a config that differs from the checkpoint's: {changes}. "
                       "Optimizer and scheduler states (learning rates, schedule lengths) continue as saved")
    logger.info(f"resumed from {path} at iteration {trainer.iter} (epoch {trainer.epoch}, "
                f"{trainer.data.batches_in_epoch} batches into it)")

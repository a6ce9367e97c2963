"""From a validated config to a running Trainer (and the pieces tools/test.py reuses)."""

from __future__ import annotations

import logging
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from framework.config import import_custom_modules, save_config, to_plain
from framework.data.loader import build_dataloader
from framework.engine import checkpoint as ckpt
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


def load_weights(task: torch.nn.Module, path: str) -> None:
    """Initialise the task from `load_from`: tensors whose name and shape match are loaded."""
    state = ckpt.load_checkpoint(path)
    weights = state.get("task", state)
    own = task.state_dict()
    matched = {k: v for k, v in weights.items() if k in own and own[k].shape == v.shape}
    if not matched:
        raise CheckpointError(f"load_from: no tensor of {path} matches the task's names and shapes")
    task.load_state_dict(matched, strict=False)
    logger.info(f"load_from {path}: loaded {len(matched)}/{len(own)} tensors "
                f"({len(weights) - len(matched)} in the file unused)")


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


def find_resume_checkpoint(work_dir: str) -> Path:
    folder = Path(work_dir) / "checkpoints"
    latest = ckpt.read_latest(folder)
    if latest is None:
        raise CheckpointError(f"--resume: no checkpoint to resume from in {folder}")
    return latest


def build_trainer(cfg: DictConfig, work_dir: str, resume: str | bool | None = None) -> Trainer:
    """Everything a run needs, built from the config; `resume` True means the latest checkpoint."""
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    init_distributed(plain["dist"]["backend"], plain["dist"]["timeout"])
    device = select_device(plain["device"])
    seed_everything(plain["seed"], plain["deterministic"])
    rank, world_size = get_rank(), get_world_size()

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
    max_iters = train["max_iters"] or train["max_epochs"] * len(train_loader)
    task = build_task(plain, device)
    if plain.get("load_from"):
        load_weights(task, plain["load_from"])
    if plain["sync_bn"]:
        for name, network in task.networks().items():
            setattr(task, name, convert_sync_batchnorm(network, device))
    amp_dtype = amp_settings(plain["amp"])
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    optim = build_optimizers(plain, task, max_iters, scaler)
    optim.ddp_networks = wrap_networks(task, device, plain["dist"]["find_unused_parameters"],
                                       plain["dist"]["broadcast_buffers"])
    metrics = build_metrics(plain)

    writer = None
    if is_main():
        save_config(cfg, Path(work_dir) / "config.yaml")
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(Path(work_dir) / "tensorboard"))

    accumulate = train["accumulate"]
    if not isinstance(accumulate, int) or accumulate < 1:
        raise ConfigError(f"train.accumulate: must be a positive integer, got {accumulate!r}")
    trainer = Trainer(task, optim, train_loader, val_loader, metrics, build_hooks(plain), max_iters,
                      work_dir, device, config_text=OmegaConf.to_yaml(cfg), writer=writer,
                      accumulate=accumulate, amp_dtype=amp_dtype)
    if resume:
        path = find_resume_checkpoint(work_dir) if resume is True else Path(resume)
        trainer.load_state_dict(ckpt.load_checkpoint(path))
        logger.info(f"resumed from {path} at iteration {trainer.iter}")

    batch = train_loader.batch_size
    params = sum(p.numel() for p in task.parameters())
    logger.info(f"work_dir {work_dir}  device {device}  processes {world_size}  batch {batch} per process "
                f"x {accumulate} accumulated = {batch * world_size * accumulate} per step  "
                f"parameters {params / 1e6:.2f}M  max_iters {max_iters}")
    return trainer

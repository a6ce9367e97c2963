"""From a validated config to a ready Trainer, in named stages (and the pieces tools/test.py reuses).

The order of `build_trainer` matters and is the one place to read it:
loaders -> the first two samples -> networks (task, frozen/norm_eval, the data of a task conditioned on label
maps, `weight: auto` class weights, the first step's forward on those samples, pretrained unless resuming, SyncBN, channels_last)
-> optimizers (+ GradScaler) -> DDP (rank 0's weights broadcast) -> hooks (before the first file) -> loggers (rank 0)
-> Trainer -> resume -> run summary. The process group is the caller's (tools/train.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from framework.analysis.class_weights import resolve_auto_class_weights
from framework.config import import_custom_modules, save_config, to_plain
from framework.data.loader import build_dataloader, describe_loader
from framework.dist import get_rank, get_world_size, is_main, wrap_networks
from framework.dist.sync_bn import convert_sync_batchnorm
from framework.engine import network_settings, pretrained
from framework.engine.hooks import CheckpointHook, EvalHook, HParamsHook, LoggerHook, LRSchedulerHook
from framework.engine.hooks.thread_tuner import ThreadTunerHook
from framework.engine.label_map_data import check_label_map_data
from framework.engine.loggers import LoggerGroup, build_loggers
from framework.engine.nonfinite import NonFiniteGuard
from framework.engine.random_state import seed_everything
from framework.engine.resume import accumulate_on_resume, checkpoint_to_resume, resume_trainer
from framework.engine.startup_check import check_first_step, first_training_batch
from framework.engine.stop import stop_signals
from framework.engine.trainer import Trainer
from framework.errors import ConfigError
from framework.metrics import is_per_class
from framework.metrics.base import check_metrics_fit_images, fit_metrics_to_dataset, known_result_names
from framework.optim.optimizers import Optimizers, build_optimizers
from framework.registry import HOOKS, METRICS, TASKS, did_you_mean
from framework.runtime import precision
from framework.runtime.compile import compile_networks
from framework.runtime.malloc import tune_malloc
from framework.runtime.precision import autocast_dtype, describe_memory_format, use_channels_last
from framework.runtime.threads import apply_threads, auto_chosen, resumed_threads, usable_cores

logger = logging.getLogger("framework")

def build_trainer(cfg: DictConfig, work_dir: str, resume: str | bool | None = None,
                  overrides: list[str] | tuple[str, ...] = (), allow_new_world_size: bool = False) -> Trainer:
    """Everything a run needs, built from the config.

    `resume`: a checkpoint path, True for the work dir's latest, None to follow `auto_resume`,
    or (path, state) of a checkpoint read already.
    `overrides`: the command line's key=value list, recorded in every checkpoint.
    `allow_new_world_size`: resume on a number of processes that cannot keep the global batch.
    """
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    loggers = build_loggers(plain["loggers"])  # every rank checks the keywords; rank 0 writes
    device = select_device(plain["device"])
    seed_everything(plain["seed"], plain["deterministic"])
    torch.backends.cudnn.benchmark = cudnn_benchmark(plain)
    tune_malloc(plain["malloc_tuning"])
    logger.info(apply_threads(plain["threads"], logger))
    resume_from = checkpoint_to_resume(work_dir, resume, plain["auto_resume"])
    if resume_from is not None and plain["deterministic"] is not False and device.type == "cpu":
        keep_recorded_threads(plain, resume_from[1]["meta"])
    train_loader, val_loader = build_loaders(plain, device)
    first_batch = first_training_batch(train_loader, val_loader, device)  # a failing pipeline, mixed sizes
    if resume_from is not None:  # on another number of processes: the same global batch
        plain["train"]["accumulate"] = accumulate_on_resume(*resume_from, get_world_size(), train_loader.batch_size,
                                                            plain["train"]["accumulate"], allow_new_world_size)
    log_device_defaults(plain, device, train_loader)
    max_iters = total_iterations(plain["train"], len(train_loader))
    task = build_networks(plain, device, work_dir, load_pretrained=resume_from is None, train_loader=train_loader,
                          first_batch=first_batch, val_loader=val_loader)
    amp_dtype = autocast_dtype(plain["amp"], device)
    logger.info(precision.describe(plain["amp"], device, amp_dtype))
    if (emulated := precision.emulated_bf16_warning(device, amp_dtype)) is not None:
        logger.warning(emulated)
    optim = build_optim(plain, task, device, max_iters, amp_dtype)
    optim.ddp_networks = wrap_networks(task, device, plain["dist"]["find_unused_parameters"],
                                       plain["dist"]["broadcast_buffers"])  # after loading: rank 0's weights
    hooks = build_hooks(plain, val_loader) + thread_tuner(plain, device)  # before the first file: a wrong name
    logger_group = open_loggers(cfg, work_dir, loggers, resume_from[1]["meta"]["iter"] if resume_from else None)
    trainer = Trainer(task, optim, train_loader, hooks, max_iters, work_dir, device, loggers=logger_group,
                      accumulate=plain["train"]["accumulate"], amp_dtype=amp_dtype,
                      nan_guard=NonFiniteGuard(plain["train"]["nan_policy"]),
                      config_text=OmegaConf.to_yaml(cfg), overrides=overrides,
                      stop_signals=stop_signals(plain["dist"]["requeue_signal"]))
    if resume_from is not None:
        resume_trainer(trainer, *resume_from, current_config=to_plain(cfg))  # the config as written
    log_run_summary(trainer, train_loader.batch_size)
    return trainer


# ----------------------------------------------------------------------------- stages


def select_device(spec: str = "auto") -> torch.device:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if spec == "auto":
        spec = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    elif spec == "cuda":  # each process its own GPU, as under `auto` (not every rank on the current one)
        spec = f"cuda:{local_rank}"
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise ConfigError(f"device: '{spec}' is not a device (use auto, cpu, cuda or cuda:N)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device: '{spec}' asked for, but CUDA is not available on this machine")
    return device


def keep_recorded_threads(cfg: dict, meta: dict) -> None:
    """A deterministic CPU run resumed at the thread count it was trained with, or a warning that
    it cannot be (runtime/threads.py): another count sums in another order."""
    threads, line, warning = resumed_threads(meta.get("threads"), torch.get_num_threads(), cfg["threads"])
    if threads is not None:
        torch.set_num_threads(threads)
    if line is not None:
        (logger.warning if warning else logger.info)(line)


def cudnn_benchmark(cfg: dict) -> bool:
    # Training crops have one size, so cuDNN's per-shape search pays once (a new evaluation size
    # searches again); deterministic runs (`true` or `warn`) need cuDNN's fixed choice. No effect on the CPU.
    return bool(cfg["cudnn_benchmark"]) and cfg["deterministic"] is False


def log_device_defaults(cfg: dict, device: torch.device, train_loader) -> None:
    """What the device-dependent defaults came to (loader workers, pinned memory; cuDNN's search)."""
    logger.info(describe_loader(train_loader, cfg["data"]["train"], "data.train"))
    if device.type == "cuda":
        reason = "" if cfg["cudnn_benchmark"] is False or cudnn_benchmark(cfg) else " (deterministic)"
        logger.info(f"cudnn.benchmark {'on' if torch.backends.cudnn.benchmark else 'off'}{reason}")


def build_loaders(cfg: dict, device: torch.device):
    """(training loader, validation loader or None); each process reads its own shard. Worker
    processes (`num_workers: auto`) count the cores the threads do (runtime/threads.py)."""
    data, rank, world_size = cfg["data"], get_rank(), get_world_size()
    if "train" not in data:
        raise ConfigError("data.train: missing (the training loader)")
    cores = usable_cores()[0]
    train = build_dataloader(data["train"], "data.train", train=True, seed=cfg["seed"], rank=rank,
                             world_size=world_size, device=device, cores=cores)
    val = None
    if data.get("val") is not None:
        val = build_dataloader(data["val"], "data.val", train=False, rank=rank, world_size=world_size, device=device,
                               cores=cores)
    return train, val


def total_iterations(train: dict, batches_per_epoch: int) -> int:
    """train.max_iters, or max_epochs in optimizer steps (each takes `accumulate` batches)."""
    return train["max_iters"] or train["max_epochs"] * (batches_per_epoch // train["accumulate"])


def build_task(cfg: dict, device: torch.device):
    return TASKS.build(cfg["task"], path="task").to(device)


def build_networks(cfg: dict, device: torch.device, work_dir: str, load_pretrained: bool, train_loader=None,
                   first_batch=None, val_loader=None):
    """The task, its networks frozen/kept in eval as configured, the loaders' data checked for a task
    conditioned on label maps (engine/label_map_data.py), `weight: auto` class weights from
    `train_loader`'s data, the first step's forward tried on `first_batch` (engine/startup_check.py),
    pretrained weights loaded (not when resuming: the checkpoint holds the weights), SyncBN,
    channels_last, compiled."""
    task = build_task(cfg, device)
    networks = network_settings.configured_networks(task)
    for _, network, settings in networks:
        network_settings.freeze_and_keep_eval(network, settings)  # before the optimizers pick parameters
    for path, loader in (("data.train", train_loader), ("data.val", val_loader)):
        if loader is not None:  # before the first step, which would one-hot encode a bad label map
            check_label_map_data(task, loader, path, training=path == "data.train")
    if train_loader is not None:  # `weight: auto` losses (rank 0 counts, cached in the work dir): the first step needs them
        resolve_auto_class_weights(task, train_loader.dataset, work_dir, cfg["data"]["train"]["dataset"], device,
                                   workers=train_loader.num_workers)
    if first_batch is not None:  # before the load report is written, and before compile would trace it
        check_first_step(task, first_batch, cfg["task"])
    if load_pretrained:
        pretrained.load_pretrained(task, cfg.get("load_from"), work_dir, write_report=is_main())
    elif cfg.get("load_from") or any("init" in settings for _, _, settings in networks):
        logger.info("load_from/init not applied: the checkpoint being resumed holds the weights")
    if cfg["sync_bn"]:
        if task.uses_double_backward:  # pytorch#61222
            raise ConfigError("sync_bn: SyncBatchNorm has no double backward, which the task's gradient penalty "
                              "(R1 or WGAN-GP) needs; set sync_bn: false or remove the penalty")
        for name, network in task.networks().items():
            setattr(task, name, convert_sync_batchnorm(network, device))
    channels_last = use_channels_last(cfg["channels_last"], device)
    if cfg["channels_last"] == "auto":
        logger.info(describe_memory_format(channels_last))
    if channels_last:
        task.to(memory_format=torch.channels_last)  # 4-D weights (and the EMA copy) go NHWC
    compile_networks(task.networks(), cfg["compile"], device)  # in place, before DDP wraps them
    return task


def build_optim(cfg: dict, task, device: torch.device, max_iters: int, amp_dtype: torch.dtype | None) -> Optimizers:
    """The optimizers and schedulers; a GradScaler for float16 AMP; the non-finite step policy."""
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    train = cfg["train"]
    return build_optimizers(cfg, task, max_iters, scaler, skip_nonfinite=train["nan_policy"] == "skip",
                            max_skips=train["nan_max_skips"])


def open_loggers(cfg: DictConfig, work_dir: str, loggers: list, resumed_iter: int | None) -> LoggerGroup:
    """On rank 0: save the resolved config and open the loggers; an empty group on other ranks."""
    if not is_main():
        return LoggerGroup()
    save_config(cfg, Path(work_dir) / "config.yaml")
    group = LoggerGroup(loggers)
    group.open(work_dir, OmegaConf.to_yaml(cfg), resumed_iter)
    return group


def build_metrics(cfg: dict) -> list:
    nodes = cfg.get("metrics") or []
    return [METRICS.build(node, path=f"metrics[{i}]") for i, node in enumerate(nodes)]


def build_hooks(cfg: dict, val_loader) -> list:
    train = cfg["train"]
    metrics = build_metrics(cfg)
    if val_loader is not None:
        fit_metrics_to_dataset(metrics, val_loader.dataset, "data.val.dataset")
        check_metrics_fit_images(metrics, val_loader.dataset, "data.val.dataset")
    hooks = [
        LoggerHook(interval=train["log_interval"], progress_bar=train["progress_bar"]),
        LRSchedulerHook(),
        EvalHook(val_loader, metrics, interval=train["val_interval"], at_start=train["val_at_start"],
                 num_images=train["vis_images"]),
        CheckpointHook(interval=train["ckpt_interval"], keep_last=train["keep_last"],
                       best_metric=train["best_metric"], best_mode=train["best_mode"]),
        HParamsHook(best_metric=train["best_metric"], best_mode=train["best_mode"]),
    ]
    configured = [HOOKS.build(node, path=f"hooks[{i}]") for i, node in enumerate(cfg.get("hooks") or [])]
    evaluated = metrics if val_loader is not None else []
    check_metric_name("train.best_metric", train["best_metric"], evaluated)
    for i, hook in enumerate(configured):
        for key, name in hook.monitored_metrics().items():
            check_metric_name(f"hooks[{i}].{key}", name, evaluated)
    return hooks + configured


def thread_tuner(cfg: dict, device: torch.device) -> list:
    """[ThreadTunerHook] where `threads: auto` chose the count of a lone CPU process that need not
    repeat bit for bit (runtime/thread_tuning.py: fewer threads while the machine is busy), else []."""
    if not auto_chosen(cfg["threads"]) or device.type != "cpu" or get_world_size() > 1:
        return []
    if cfg["deterministic"] is not False:
        logger.info("threads: not adapted to the machine's load (deterministic: a count that varies with the "
                    "load would vary the sums)")
        return []
    logger.info(f"threads: fewer while the machine is busy (a check at iteration {ThreadTunerHook.first} and "
                f"every {ThreadTunerHook.interval} iterations; pin them with threads: N)")
    return [ThreadTunerHook(torch.get_num_threads())]


def check_metric_name(path: str, name: str | None, metrics: list) -> None:
    """The config value at `path` must name a value the evaluation returns: refused at start-up,
    not at the first evaluation after an interval of training (a custom metric that cannot name
    its values in advance is still checked there)."""
    known = known_result_names(metrics) if name and metrics else None
    if known is not None and name not in known:
        summary = ", ".join(k for k in known if not is_per_class(k))
        per_class = next((k for k in known if is_per_class(k)), None)
        also = f"; per class e.g. {per_class}" if per_class else ""
        raise ConfigError(f"{path}: '{name}' is not a metric of this run (have: {summary}{also})"
                          f"{did_you_mean(name, known)}")


def log_run_summary(trainer: Trainer, batch: int) -> None:
    params = sum(p.numel() for p in trainer.task.parameters())
    trainable = sum(p.numel() for p in trainer.task.parameters() if p.requires_grad)
    world_size, accumulate = get_world_size(), trainer.accumulate
    logger.info(f"work_dir {trainer.work_dir}  device {trainer.device}  processes {world_size}  batch {batch} "
                f"per process x {accumulate} accumulated = {batch * world_size * accumulate} per step  "
                f"parameters {params / 1e6:.2f}M ({trainable / 1e6:.2f}M trained)  max_iters {trainer.max_iters}")

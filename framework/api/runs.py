"""Training and evaluation runs: what tools/train.py and tools/test.py do after parsing their
arguments, callable from Python (`framework.train`, `framework.evaluate`). The tools keep their
command-line parts (arguments, exit codes, the printed table, metrics.json); one copy of the rest."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path

from framework.config import default_work_dir, import_custom_modules, load_config, to_plain
from framework.errors import ConfigError
from framework.runtime.cli import log_file_only, setup_logging, startup_done
from framework.runtime.threads import omp_num_threads

logger = logging.getLogger("framework")


def run_training(config, overrides=(), work_dir=None, resume=None, overwrite: bool = False,
                 allow_new_world_size: bool = False) -> tuple[int, str]:
    """Train `config` (a YAML file) with `overrides` (key=value) into `work_dir` (default: the
    config's work_dir, else work_dirs/<config name>). (0, work dir) when it ran to the end, (128 +
    the signal number, work dir) when a stop signal ended it early (its checkpoint saved)."""
    overrides = list(overrides or ())
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite together: --resume continues the run in the work dir, "
                          "--overwrite moves it aside to start a new one; give one of them")
    notes: list[str] = []
    cfg = load_config(config, overrides, notes)
    omp_num_threads()  # an OMP_NUM_THREADS OpenMP ignores: one line before torch is imported and the work dir claimed
    cfg.work_dir = str(work_dir or cfg.work_dir or default_work_dir(config))
    from framework.dist import check_launch_environment, destroy_distributed, init_distributed, is_main
    from framework.engine.build import build_trainer, select_device
    from framework.engine.resume import auto_resume_enabled, require_run_to_resume
    from framework.runtime.workdir import claim_work_dir

    if resume is True:  # before the work dir is claimed, which may move an untrained start aside
        require_run_to_resume(cfg.work_dir)
    elif isinstance(resume, (str, os.PathLike)):  # a file that is no checkpoint: refused before anything is written
        from framework.checkpoint.files import load_checkpoint

        resume = (Path(resume), load_checkpoint(resume))
    resuming = bool(resume) or auto_resume_enabled(cfg.auto_resume)
    trainer, froze = None, False
    try:
        check_launch_environment()  # RANK, LOCAL_RANK...: one line naming a bad one, before anything reads them
        select_device(cfg.device)  # a device this machine lacks: a config error before NCCL's set-up fails on it
        from_slurm = init_distributed(cfg.dist.backend, cfg.dist.timeout, cfg.device,  # the one owner of the group
                                      cfg.dist.startup_timeout)
        setup_logging(main_process=is_main())  # the console first: the work dir may be refused
        if from_slurm:
            logger.info(f"srun: {from_slurm['WORLD_SIZE']} processes from SLURM_* variables, master "
                        f"{from_slurm['MASTER_ADDR']}:{from_slurm['MASTER_PORT']}")
        with claim_work_dir(cfg.work_dir, resuming, overwrite, main_process=is_main()) as notices:
            setup_logging(cfg.work_dir, main_process=is_main())
            for notice in notices:  # shown on the console already: into train.log too
                log_file_only(notice)
            for note in notes:  # e.g. base keys dropped by a change of type, logged on rank 0
                logger.info(f"config: {note}")
            trainer = build_trainer(cfg, cfg.work_dir, resume=resume, overrides=overrides,
                                    allow_new_world_size=allow_new_world_size)
            resume = None  # a checkpoint read above is not held through the training
            froze = startup_done()
            trainer.fit()
        stopped_early = trainer.stop_signal is not None and trainer.iter < trainer.max_iters
        # Not 0: a script running `train.py && test.py` must not take a stopped run for a finished one.
        return (128 + trainer.stop_signal if stopped_early else 0), cfg.work_dir
    finally:
        # DDP wrappers hold the process group: free them (and the reference cycles around them)
        # first, so the group is torn down here and not during interpreter shutdown, where
        # gloo's teardown aborted a finished rank with SIGABRT in ~3% of 2-process runs.
        del trainer
        if froze:  # start-up's objects too: the trainer is one. Not what an in-process caller froze
            gc.unfreeze()
        gc.collect()
        destroy_distributed()


def run_evaluation(config, checkpoint, overrides=(), work_dir=None, show_dir=None, log_file: bool = True,
                   on_results=None) -> dict:
    """Evaluate `checkpoint` on the config's data.test (else data.val) and return the metrics.
    `show_dir`: each batch's pictures (the task's save_visuals) go there. `on_results(metrics,
    checkpoint state, work dir)` reports them before a --show-dir left empty is refused, so the
    numbers of a finished evaluation are kept."""
    from framework.checkpoint import files as ckpt
    from framework.data.loader import build_dataloader
    from framework.data.sources import folders_read_by
    from framework.engine.build import build_metrics, build_task, select_device
    from framework.engine.evaluation import evaluate
    from framework.engine.label_map_data import check_label_map_data
    from framework.engine.nonfinite import refuse_nonfinite_weights
    from framework.metrics.base import fit_metrics_to_dataset
    from framework.runtime.overwrite import refuse_writing_over_inputs
    from framework.runtime.threads import apply_threads, usable_cores

    cfg = load_config(config, list(overrides or ()))
    omp_num_threads()  # refused before test.log is written
    work_dir = str(work_dir or cfg.work_dir or default_work_dir(config))
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    device = select_device(plain["device"])
    section = plain["data"].get("test") or plain["data"].get("val")
    if section is None:
        raise ConfigError("data.test / data.val: the config has no evaluation data")
    state = ckpt.load_checkpoint(checkpoint)  # refuses anything but a training checkpoint
    refuse_nonfinite_weights(state["task"], str(checkpoint))
    task = build_task(plain, device)
    ckpt.load_task_weights(task, state, checkpoint)
    setup_logging(work_dir if log_file else None, "test.log")  # the work dir is only written once the checkpoint fits
    logger.info(apply_threads(plain["threads"], logger))
    section_path = "data.test" if plain["data"].get("test") else "data.val"
    loader = build_dataloader(section, section_path, train=False, device=device, cores=usable_cores()[0])
    check_label_map_data(task, loader, section_path, training=False)  # before --show-dir's first image
    if show_dir:  # its pictures are named like the samples: never in a folder the data comes from
        data = [(f"{section_path}.dataset", folder) for folder in folders_read_by(loader.dataset)]
        refuse_writing_over_inputs("--show-dir", show_dir, data,
                                   other_reads=[("--config", config), ("--checkpoint", checkpoint)])
    metrics = build_metrics(plain)
    fit_metrics_to_dataset(metrics, loader.dataset, f"{section_path}.dataset")

    def save(i, batch, outputs):
        if show_dir:
            task.save_visuals(batch, outputs, show_dir)

    startup_done()
    before = show_dir_files(show_dir)
    results = evaluate(task, loader, metrics, device, on_batch=save)
    if on_results is not None:
        on_results(results, state, work_dir)
    if show_dir and show_dir_files(show_dir) == before:  # a task's save_visuals that writes nothing
        raise ConfigError(f"--show-dir {show_dir}: {type(task).__name__}'s save_visuals wrote no file there")
    return results


def show_dir_files(folder) -> dict[Path, int]:
    """{file: its modification time} under `folder` (compared before and after: was anything written?)."""
    if not folder or not Path(folder).is_dir():
        return {}
    return {path: path.stat().st_mtime_ns for path in Path(folder).rglob("*") if path.is_file()}

"""Train from a config:

    python tools/train.py --config configs/segmentation/unet_shapes.yaml [key=value ...]
    python tools/train.py --config CFG --resume            # continue from the latest checkpoint
    python tools/train.py --config CFG --resume PATH       # or from a given one
    python tools/train.py --config CFG --overwrite         # a new run; the old one is moved aside

SIGTERM, SIGINT (Ctrl-C) or the requeue signal (dist.requeue_signal, SIGUSR1 by default) finishes
the current iteration, saves a checkpoint and exits with status 128 + the signal number (143, 130,
138 for SIGUSR1); `--resume` then continues exactly. A second Ctrl-C stops at once, without
saving. Under Slurm, `srun python tools/train.py ...` (one task per GPU, no torchrun) takes the
ranks from SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS; a requeued job resumes by itself (auto_resume:
auto looks at SLURM_RESTART_COUNT). See framework/dist/slurm.py. Every rank must join within
dist.startup_timeout seconds, or all stop naming the ranks that did not. Resumed on another number
of processes, a run keeps its global batch (train.accumulate changes) where it can, and is
refused where it cannot, unless --allow-new-world-size.
"""

import argparse
import gc
import logging
import os

# Only what reads and validates the config is imported up front (no torch): `--help` and a
# config mistake answer in well under two seconds. torch comes with the engine, in main().
from framework.config import default_work_dir, load_config
from framework.errors import ConfigError
from framework.runtime.cli import (
    exit_process,
    log_file_only,
    pause_collector_for_startup,
    run,
    setup_logging,
    startup_done,
)


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument("--work-dir", help="where logs, checkpoints and TensorBoard files go "
                        "(default: the config's work_dir, else work_dirs/<config name>)")
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="CKPT",
                        help="resume from CKPT, or from the latest checkpoint in the work dir")
    parser.add_argument("--overwrite", action="store_true",
                        help="start a new run in a work dir that holds one, moving the old run aside")
    parser.add_argument("--allow-new-world-size", action="store_true",
                        help="resume on a number of processes that cannot keep the checkpoint's global batch "
                        "(processes x batch x accumulate): continue with the config's batch and accumulate")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def main(args: argparse.Namespace) -> int:
    if isinstance(args.resume, str) and "=" in args.resume and not os.path.exists(args.resume):
        # `--resume key=value ...`: argparse took the first override as the checkpoint path.
        args.overrides.insert(0, args.resume)
        args.resume = True
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite together: --resume continues the run in the work dir, "
                          "--overwrite moves it aside to start a new one; give one of them")
    notes: list[str] = []
    cfg = load_config(args.config, args.overrides, notes)
    cfg.work_dir = args.work_dir or cfg.work_dir or default_work_dir(args.config)
    from framework.dist import check_launch_environment, destroy_distributed, init_distributed, is_main
    from framework.engine.build import build_trainer, select_device
    from framework.engine.resume import auto_resume_enabled, require_run_to_resume
    from framework.runtime.workdir import claim_work_dir

    if args.resume is True:  # before the work dir is claimed, which may move an untrained start aside
        require_run_to_resume(cfg.work_dir)
    resuming = bool(args.resume) or auto_resume_enabled(cfg.auto_resume)
    trainer = None
    try:
        check_launch_environment()  # RANK, LOCAL_RANK...: one line naming a bad one, before anything reads them
        select_device(cfg.device)  # a device this machine lacks: a config error before NCCL's set-up fails on it
        from_slurm = init_distributed(cfg.dist.backend, cfg.dist.timeout, cfg.device,  # the one owner of the group
                                      cfg.dist.startup_timeout)
        setup_logging(main_process=is_main())  # the console first: the work dir may be refused
        if from_slurm:
            logging.getLogger("framework").info(
                f"srun: {from_slurm['WORLD_SIZE']} processes from SLURM_* variables, master "
                f"{from_slurm['MASTER_ADDR']}:{from_slurm['MASTER_PORT']}")
        with claim_work_dir(cfg.work_dir, resuming, args.overwrite, main_process=is_main()) as notices:
            setup_logging(cfg.work_dir, main_process=is_main())
            for notice in notices:  # shown on the console already: into train.log too
                log_file_only(notice)
            for note in notes:  # e.g. base keys dropped by a change of type, logged on rank 0
                logging.getLogger("framework").info(f"config: {note}")
            trainer = build_trainer(cfg, cfg.work_dir, resume=args.resume, overrides=args.overrides,
                                    allow_new_world_size=args.allow_new_world_size)
            startup_done()
            trainer.fit()
        stopped_early = trainer.stop_signal is not None and trainer.iter < trainer.max_iters
        # Not 0: a script running `train.py && test.py` must not take a stopped run for a finished one.
        return 128 + trainer.stop_signal if stopped_early else 0
    finally:
        # DDP wrappers hold the process group: free them (and the reference cycles around them)
        # first, so the group is torn down here and not during interpreter shutdown, where
        # gloo's teardown aborted a finished rank with SIGABRT in ~3% of 2-process runs.
        del trainer
        gc.unfreeze()  # start-up's objects too (startup_done froze them): the trainer is one
        gc.collect()
        destroy_distributed()


def entry() -> int:
    if "TORCHELASTIC_RUN_ID" in os.environ:  # under torchrun: the failing rank's error goes in its summary
        from torch.distributed.elastic.multiprocessing.errors import record

        from framework.runtime.cli import write_torchelastic_error_file

        return record(run)(main, parse_args(), on_error=write_torchelastic_error_file)
    return run(main, parse_args())


if __name__ == "__main__":
    pause_collector_for_startup()
    exit_process(entry())

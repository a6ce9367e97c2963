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
import os

# Only what reads and validates the config is imported up front (no torch): `--help` and a
# config mistake answer in well under two seconds. torch comes with the engine, in run_training.
from framework.api.runs import run_training
from framework.runtime.cli import exit_process, given_path, output_folder, pause_collector_for_startup, run


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="YAML config file")
    parser.add_argument("--work-dir", type=output_folder, help="where logs, checkpoints and TensorBoard files go "
                        "(default: the config's work_dir, else work_dirs/<config name>)")
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="CKPT", type=given_path,
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
    code, _ = run_training(args.config, args.overrides, args.work_dir, args.resume, args.overwrite,
                           args.allow_new_world_size)
    return code


def entry() -> int:
    if "TORCHELASTIC_RUN_ID" in os.environ:  # under torchrun: the failing rank's error goes in its summary
        from torch.distributed.elastic.multiprocessing.errors import record

        from framework.runtime.cli import write_torchelastic_error_file

        return record(run)(main, parse_args(), on_error=write_torchelastic_error_file)
    return run(main, parse_args())


if __name__ == "__main__":
    pause_collector_for_startup()
    exit_process(entry())

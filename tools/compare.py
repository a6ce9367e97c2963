"""Train every config with every seed, then compare the configs over the seeds:

    python tools/compare.py --configs A.yaml B.yaml --seeds 0 1 2 [--metric mIoU] [--jobs N]
                            [--work-dir D] [key=value ...]

Each (config, seed) pair is an ordinary `tools/train.py` run in D/<config name>/seed<S>/ (the
overrides apply to every run; the seed is set by --seeds). --jobs runs go at once, the cores
divided between them: each run gets its own cores and that many threads. The report, per config
and metric: final and best values (mean ± sd, min..max), the paired difference against the
first config seed by seed, and how much the best evaluation flatters the last; in D/summary.md,
D/summary.json and D/curves_<metric>.png.

Rerunning the same command skips finished runs and resumes interrupted ones from their
checkpoints. SIGTERM or Ctrl-C stops the runs after they save a checkpoint (exit 128 + signal).
A run that fails is reported with its error line and the others go on (exit status 1).
--metric names values of metrics.jsonl (default: the first config's train.best_metric); best is
the highest, or the lowest for the first config's best_metric with best_mode: min or a
name written `NAME:min` (e.g. `--metric PSNR L1:min`).

Beyond this machine (docs/experiments.md):
    --launcher slurm [--slurm partition=gpu --slurm timeout_min=240 --slurm options.yaml ...]
        submits the runs neither finished nor queued as ONE Slurm job array (submitit, `.[cluster]`)
        and returns; SIGUSR1 before the time limit checkpoints, requeues and resumes a task.
    --launcher worker [--stale-minutes M]
        run the same command on any number of machines sharing the work dir: each claims the next
        run (an atomic lock beside it), and takes over a run whose worker is gone.
    --report --work-dir D
        the report of whatever has finished so far, marking runs pending, running, requeued, failed.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from framework.config.rules import integer, number
from framework.config.schema import SEED_MAX
from framework.errors import ConfigError
from framework.runtime.cli import check_options, given_path, output_folder, run

DEFAULT_STALE_MINUTES = 10.0
MAX_STALE_MINUTES = 7 * 24 * 60  # a worker silent for a week is gone; more would never take its run over

TRAIN = Path(__file__).resolve().parent / "train.py"


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", action="append", metavar="CFG", type=given_path, help="YAML configs")
    parser.add_argument("--seeds", nargs="+", action="append", metavar="S", help="seeds, one run each")
    parser.add_argument("--metric", nargs="+", action="append", metavar="NAME",
                        help="metrics.jsonl values to compare (NAME:min where lower is better)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (at most one per core; default 1)")
    parser.add_argument("--work-dir", type=output_folder,
                        help="where the runs and the report go (default: work_dirs/compare_<names>)")
    parser.add_argument("--launcher", choices=("local", "slurm", "worker"), default="local",
                        help="local: --jobs processes here (default); slurm: one job array; worker: claim runs "
                        "from a work dir shared with other workers")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE|FILE.yaml",
                        help="a submitit/Slurm option (partition=gpu, timeout_min=240, gpus_per_node=1, "
                        "array_parallelism=8, ...) or a YAML file with a `launcher:` block of them; repeatable")
    parser.add_argument("--stale-minutes", type=float, default=None,
                        help="worker: a run whose worker on another host has not beaten its heartbeat for this "
                        "long is taken over (default 10)")
    parser.add_argument("--report", action="store_true",
                        help="only write the report of the comparison in --work-dir, as far as it has got")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")
    return parser


def once(option: str, given: list[list[str]] | None) -> list[str] | None:
    """One occurrence of a list option (argparse would keep the last one silently)."""
    if given and len(given) > 1:
        raise ConfigError(f"{option} given twice; list every value after one {option}")
    return given[0] if given else None


def take_overrides(values: list[str], overrides: list[str], keep) -> list[str]:
    """`--seeds 0 1 train.max_iters=9`: the list option took the overrides that follow it."""
    kept = [v for v in values if "=" not in v or keep(v)]
    overrides += [v for v in values if v not in kept]
    return kept


def main(args: argparse.Namespace) -> int:
    if args.report:
        return report_only(args)
    if not args.configs or not args.seeds:
        raise ConfigError("--configs and --seeds are required (or --report --work-dir D for a comparison's report)")
    overrides = list(args.overrides)
    configs = take_overrides(once("--configs", args.configs), overrides, keep=lambda v: Path(v).exists())
    seeds = take_overrides(once("--seeds", args.seeds), overrides, keep=lambda v: False)
    metrics = once("--metric", args.metric)
    metrics = take_overrides(metrics, overrides, keep=lambda v: False) if metrics else None
    seeds = [int(s) if s.isdigit() else s for s in seeds]
    check_options({"--seeds": (seeds, integer(0, max=SEED_MAX)), "--jobs": (args.jobs, integer(1)),
                   "--stale-minutes": (args.stale_minutes, number(above=0, max=MAX_STALE_MINUTES, finite=True))})  # None: not given
    if args.jobs != 1 and args.launcher != "local":
        raise ConfigError(f"--jobs is for --launcher local; with {args.launcher}, "
                          + ("start more workers (each runs one run at a time)" if args.launcher == "worker"
                             else "Slurm runs the tasks (--slurm array_parallelism=N caps them)"))
    if args.slurm and args.launcher != "slurm":
        raise ConfigError(f"--slurm options are for --launcher slurm, not {args.launcher}")
    if args.stale_minutes is not None and args.launcher != "worker":
        raise ConfigError(f"--stale-minutes is for --launcher worker, not {args.launcher}")
    stale_minutes = DEFAULT_STALE_MINUTES if args.stale_minutes is None else args.stale_minutes
    if args.launcher == "slurm":
        from framework.comparison.slurm_launcher import parse_options, require_slurm

        require_slurm()  # before the plan loads every config: the missing piece in one line, at once
        options = parse_options(args.slurm)
    from framework.comparison.plan import make_plan
    from framework.comparison.status import save_command

    work_dir = args.work_dir or "work_dirs/compare_" + "_".join(Path(c).stem for c in configs)
    plan = make_plan(configs, seeds, overrides, metrics, args.jobs if args.launcher == "local" else 1, work_dir)
    if args.launcher == "slurm":
        from framework.comparison.slurm_launcher import submit

        plan = dataclasses.replace(plan, threads=int(options.get("cpus_per_task") or 1))  # a task's threads
        if submit(plan, [sys.executable, str(TRAIN)], options, say=lambda line: print(line, flush=True)):
            save_command(plan.work_dir, configs, seeds, overrides, metrics, plan.threads)  # for --report
        return 0
    save_command(plan.work_dir, configs, seeds, overrides, metrics, plan.threads)
    if args.launcher == "worker":
        from framework.comparison.worker import run_as_worker

        outcomes, stop_signal = run_as_worker(plan, [sys.executable, str(TRAIN)], stale_minutes * 60,
                                              say=lambda line: print(line, flush=True))
        return finish(plan, outcomes, stop_signal)
    print(f"{len(plan.pairs)} runs ({len(plan.configs)} configs x {len(seeds)} seeds) in {plan.work_dir}, "
          f"{plan.jobs} at a time, {plan.threads} thread(s) each", flush=True)
    from framework.comparison.runner import run_pairs

    outcomes, stop_signal = run_pairs(plan, [sys.executable, str(TRAIN)], say=lambda line: print(line, flush=True))
    return finish(plan, outcomes, stop_signal)


def finish(plan, outcomes, stop_signal: int | None) -> int:
    from framework.comparison.report import to_markdown, write_report

    summary, written = write_report(plan, outcomes)
    print("\n" + to_markdown(summary))
    print("written: " + ", ".join(str(path) for path in written))
    if stop_signal is not None:
        print("stopped: rerun the same command to resume", file=sys.stderr)
        return 128 + stop_signal
    return 1 if any(o.status != "finished" for o in outcomes) else 0


def report_only(args: argparse.Namespace) -> int:
    """--report --work-dir D: the plan the command saved, the runs' records, and Slurm's queue."""
    if not args.work_dir:
        raise ConfigError("--report needs --work-dir (the comparison's folder)")
    if args.configs or args.seeds or args.overrides:
        raise ConfigError("--report takes only --work-dir: the configs, seeds and overrides are those the "
                          "comparison was started with")
    from framework.comparison.plan import make_plan
    from framework.comparison.report import to_markdown, write_report
    from framework.comparison.status import counts, current_outcomes, load_command

    command = load_command(Path(args.work_dir))
    plan = make_plan(command["configs"], command["seeds"], command["overrides"], command["metrics"], 1, args.work_dir)
    plan = dataclasses.replace(plan, threads=command.get("threads", plan.threads))
    queued = None
    if (plan.work_dir / "slurm_jobs.json").is_file():
        from framework.comparison.slurm_launcher import queued_runs

        try:
            queued = queued_runs(plan)
        except ConfigError as error:  # the report of what finished is still worth writing
            print(f"Slurm's queue unknown ({error}): runs not finished are reported from their records alone",
                  file=sys.stderr)
    outcomes = current_outcomes(plan, queued)
    summary, written = write_report(plan, outcomes)
    print(to_markdown(summary))
    print(f"runs: {counts(outcomes)}")
    print("written: " + ", ".join(str(path) for path in written))
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))

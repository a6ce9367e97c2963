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
"""

import argparse
import sys
from pathlib import Path

from framework.config.rules import integer
from framework.config.schema import SEED_MAX
from framework.errors import ConfigError
from framework.runtime.cli import check_options, given_path, output_folder, run

TRAIN = Path(__file__).resolve().parent / "train.py"


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", action="append", required=True, metavar="CFG", type=given_path, help="YAML configs")
    parser.add_argument("--seeds", nargs="+", action="append", required=True, metavar="S", help="seeds, one run each")
    parser.add_argument("--metric", nargs="+", action="append", metavar="NAME",
                        help="metrics.jsonl values to compare (NAME:min where lower is better)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (at most one per core; default 1)")
    parser.add_argument("--work-dir", type=output_folder, help="where the runs and the report go (default: work_dirs/compare_<names>)")
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
    overrides = list(args.overrides)
    configs = take_overrides(once("--configs", args.configs), overrides, keep=lambda v: Path(v).exists())
    seeds = take_overrides(once("--seeds", args.seeds), overrides, keep=lambda v: False)
    metrics = once("--metric", args.metric)
    metrics = take_overrides(metrics, overrides, keep=lambda v: False) if metrics else None
    seeds = [int(s) if s.isdigit() else s for s in seeds]
    check_options({"--seeds": (seeds, integer(0, max=SEED_MAX)), "--jobs": (args.jobs, integer(1))})
    from framework.comparison.plan import make_plan
    from framework.comparison.report import to_markdown, write_report
    from framework.comparison.runner import run_pairs

    work_dir = args.work_dir or "work_dirs/compare_" + "_".join(Path(c).stem for c in configs)
    plan = make_plan(configs, seeds, overrides, metrics, args.jobs, work_dir)
    print(f"{len(plan.pairs)} runs ({len(plan.configs)} configs x {len(seeds)} seeds) in {plan.work_dir}, "
          f"{plan.jobs} at a time, {plan.threads} thread(s) each", flush=True)
    outcomes, stop_signal = run_pairs(plan, [sys.executable, str(TRAIN)], say=lambda line: print(line, flush=True))
    summary, written = write_report(plan, outcomes)
    print("\n" + to_markdown(summary))
    print("written: " + ", ".join(str(path) for path in written))
    if stop_signal is not None:
        print("stopped: rerun the same command to resume", file=sys.stderr)
        return 128 + stop_signal
    return 1 if any(o.status != "finished" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))

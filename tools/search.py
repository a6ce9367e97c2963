"""Search hyperparameters with Optuna, each trial an ordinary tools/train.py run:

    python tools/search.py --config CFG --space space.yaml --trials N [--seed S] [--work-dir D]
                           [key=value ...]

space.yaml maps config keys to distributions (docs/experiments.md):

    optim.lr: {log_uniform: [1.0e-4, 1.0e-2]}
    task.model.base_channels: {choice: [16, 32]}

TPE (seeded by --seed) picks each trial's values; the objective is the run's best value of the
config's train.best_metric, in its best_mode direction. Each evaluation is reported to the trial
(an OptunaPruningHook in the run); with --pruner median a trial below the median of earlier
trials at the same iteration stops there with its checkpoint and is marked pruned. The study lives in D/study.journal
(Optuna's JournalStorage): the same command on several machines sharing D joins the same study,
each running N trials. D/best.yaml is the best trial as a config that trains on its own;
D/trials.md lists every trial; D/optimization_history.png and D/param_importances.png are
Optuna's plots. Then `tools/compare.py --configs CFG D/best.yaml --seeds 0 1 2` tells whether
the best trial beats the config over seeds. Needs optuna (pip install -e ".[cluster]").
"""

import argparse
import sys
from pathlib import Path

from framework.config.rules import integer
from framework.config.schema import SEED_MAX
from framework.errors import ConfigError
from framework.runtime.cli import check_options, given_path, output_folder, run

# trials of one command: each is a training run, so more is days of compute asked by a typo (a study
# outgrowing it: run the command again, it joins the same study)
MAX_TRIALS = 10_000

TRAIN = Path(__file__).resolve().parent / "train.py"


def parse_args() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=given_path, help="the YAML config every trial starts from")
    parser.add_argument("--space", required=True, type=given_path, help="YAML: config key -> {log_uniform|uniform: [low, high]} or {choice: [...]}")
    parser.add_argument("--trials", type=int, required=True, help="trials this process runs")
    parser.add_argument("--seed", type=int, default=0, help="the TPE sampler's seed (default 0)")
    parser.add_argument("--pruner", choices=("median", "none"), default="median",
                        help="median: stop a trial whose evaluation is below the median of earlier trials at the same "
                        "iteration (after --startup-trials finished trials); none: every trial runs to the end")
    parser.add_argument("--startup-trials", type=int, default=2, help="trials never pruned, to learn from (default 2)")
    parser.add_argument("--work-dir", type=output_folder, help="the study and its trials (default: work_dirs/search_<config name>)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every trial")
    return parser


def main(args: argparse.Namespace) -> int:
    check_options({"--trials": (args.trials, integer(1, max=MAX_TRIALS)), "--seed": (args.seed, integer(0, max=SEED_MAX)),
                   "--startup-trials": (args.startup_trials, integer(0, max=MAX_TRIALS))})
    for text in args.overrides:
        if text.partition("=")[0].lstrip("+") == "work_dir":
            raise ConfigError(f"override '{text}': each trial's work dir is set by tools/search.py; remove the override")
    from framework.comparison.search import require_optuna

    optuna = require_optuna()
    from omegaconf import OmegaConf

    from framework.comparison.plan import available_cores
    from framework.comparison.search import (
        TrialFailed,
        make_objective,
        open_study,
        retry_stopped_trials,
        trials_table,
        write_best_config,
        write_plots,
    )
    from framework.comparison.search_space import load_space
    from framework.config import load_config

    cfg = load_config(args.config, args.overrides)
    space = load_space(args.space, cfg)
    metric, direction = cfg.train.best_metric, cfg.train.best_mode
    if not metric:
        raise ConfigError(f"{args.config}: sets no train.best_metric; the search needs the metric to optimize")
    work_dir = Path(args.work_dir or f"work_dirs/search_{Path(args.config).stem}")
    study = open_study(work_dir, space, args.space, args.config, direction, args.seed)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    say = lambda line: print(line, flush=True)  # noqa: E731
    objective = make_objective(args.config, args.overrides, space, metric, direction, work_dir,
                               [sys.executable, str(TRAIN)], len(available_cores()), say,
                               OmegaConf.to_container(cfg.hooks), args.pruner, args.startup_trials)
    retry_stopped_trials(study, work_dir, say)
    study.optimize(objective, n_trials=args.trials, catch=(TrialFailed,))
    table = trials_table(study, metric)
    (work_dir / "trials.md").write_text(table, encoding="utf-8")
    print("\n" + table)
    best = write_best_config(study, args.config, args.overrides, work_dir / "best.yaml")
    written = [work_dir / "trials.md", *([best] if best else []), *write_plots(study, work_dir)]
    if best:
        print(f"best: trial {study.best_trial.number}, {metric} {study.best_value:.4g}; "
              f"check it over seeds: python tools/compare.py --configs {args.config} {best} --seeds 0 1 2")
    print("written: " + ", ".join(str(path) for path in written))
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(run(main, parse_args()))

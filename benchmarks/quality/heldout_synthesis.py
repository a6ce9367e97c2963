"""The held-out protocol for semantic synthesis (issue 62): scene families the configs were never
tuned on, written to disk as a user has them, each with its own independent judge; the shipped
configs/synthesis/oasis_textures.yaml and spade_textures.yaml retargeted to each family and
trained by tools/compare.py; plain scripts of the papers' methods (benchmarks/quality/heldout/plain_papers.py)
trained on the same photos in float32 and bfloat16; every generator's fakes of the val label maps
scored by the family's judge. One command:

    python benchmarks/quality/heldout_synthesis.py --work-dir DIR [--quick] [--families ...] [--seeds 0 1 2]
                                           [--iters 2000] [--judge-iters 1000] [--configs A.yaml ...] [--core N]

Work, most informative first: seed by seed the 64 px families (gratings, then the held-out
blobs), then seed by seed the 128 px bands128; for each, the family's folder (once), its judge
(once), the configs at that seed, then the plain scripts (the issue's bare OASIS in float32 and
bfloat16, SPADE's, the paper's OASIS, then the rest in bfloat16). Each unit ends in
DIR/<family>/results/<unit>.json and DIR/report.md and report.json are rewritten after each one; rerunning the same command skips
what is done and resumes the runs that were cut short (tools/compare.py's runs and the plain
scripts' from their last checkpoint). Every training process runs alone, on one core, one thread.

--quick: one family (gratings), seed 0, 40 GAN iterations, a judge of 150, fakes of the first 50
val maps scored: the whole chain in minutes (its numbers say nothing about the methods). The full
protocol (3 families x 3 seeds x (2 configs + 6 plain runs) of 2000 iterations, 3 judges of 1000)
takes days on one core: see docs/semantic-synthesis.md for the measured times.
"""

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `benchmarks.quality.heldout` from any folder

from benchmarks.quality.heldout import config_runs, families, judge, report, units  # noqa: E402
from framework.errors import ConfigError  # noqa: E402

ORDER = ["gratings", families.HELD_OUT, "bands128"]
# The plain script (OASIS without LabelMix and EMA, float32) and its bf16 twin first: together
# they say what the precision alone does; then SPADE's and the paper's full OASIS.
PLAIN = [("oasis_bare", False), ("oasis_bare", True), ("spade_paper", False), ("oasis_paper", False),
         ("spade_paper", True), ("oasis_paper", True)]
SETTINGS_FILE = "settings.json"
QUICK_VAL_MAPS = 50


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", default="work_dirs/heldout_synthesis", help="folders, runs and the report")
    parser.add_argument("--quick", action="store_true", help="one family, seed 0, a few iterations")
    parser.add_argument("--families", nargs="+", choices=ORDER, help="default: all (quick: gratings)")
    parser.add_argument("--seeds", nargs="+", type=int, help="default 0 1 2 (quick: 0)")
    parser.add_argument("--iters", type=int, help="GAN iterations (default 2000; quick 40)")
    parser.add_argument("--judge-iters", type=int, help="judge iterations (default 1000; quick 150)")
    parser.add_argument("--configs", nargs="+", type=Path, default=config_runs.CONFIGS, metavar="YAML",
                        help="synthesis configs to retarget and train (default: the shipped textures configs); "
                             "an ablation gives variants of them, each by a name of its own")
    parser.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)), help="the core the runs use")
    args = parser.parse_args(argv)
    stems = [path.stem for path in args.configs]
    if len(set(stems)) < len(stems) or any(not path.is_file() for path in args.configs):
        parser.error("--configs: existing files with distinct names (a run is named by its config's name)")
    args.families = args.families or (["gratings"] if args.quick else ORDER)
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.iters = args.iters or (40 if args.quick else 2000)
    args.judge_iters = args.judge_iters or (150 if args.quick else 1000)
    return args


def schedule(names: list[str], seeds: list[int]) -> list[tuple[int, str]]:
    """(seed, family) in the order they run: the 64 px families seed by seed (every family's seed 0
    first), then the 128 px ones, four times dearer an iteration, seed by seed."""
    by_size = sorted(names, key=lambda name: families.FAMILIES[name].size)  # stable: keeps ORDER within a size
    sizes = sorted({families.FAMILIES[name].size for name in names})
    return [(seed, name) for size in sizes for seed in seeds
            for name in by_size if families.FAMILIES[name].size == size]


def claim_work_dir(work_dir: Path, settings: dict) -> None:
    """The work dir is this protocol's with these settings, or new; else one line and out."""
    path = work_dir / SETTINGS_FILE
    if path.is_file():
        before = json.loads(path.read_text())
        if before != settings:
            changed = ", ".join(f"{k} {before.get(k)} -> {v}" for k, v in settings.items() if before.get(k) != v)
            raise ConfigError(f"--work-dir {work_dir}: holds runs of other settings ({changed}); give another folder")
        return
    if work_dir.exists() and any(work_dir.iterdir()):
        raise ConfigError(f"--work-dir {work_dir}: not empty and not this protocol's (no {SETTINGS_FILE})")
    work_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings) + "\n")


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, flush=True)


def run_family_seed(args, work_dir: Path, name: str, seed: int, settings: dict) -> None:
    family = families.FAMILIES[name]
    classes = len(family.classes)
    root = families.write_family(name, work_dir / "data" / name, seed=0)
    results = work_dir / name / "results"
    results.mkdir(parents=True, exist_ok=True)

    def unit(result_name: str, work) -> None:
        path = results / f"{result_name}.json"
        if path.is_file():
            return
        log(f"{name}: {result_name}")
        units.write_json(path, work())
        log(f"{name}: {result_name} done: {path.read_text().strip()[:300]}")
        report.write_report(work_dir, args.families, families.HELD_OUT, settings)

    batch = 16 if family.size <= 64 else 8  # the judge sees the same pixels per step at 128
    unit("judge", lambda: units.judge_unit(root, results.parent, classes, args.judge_iters, batch, log))
    trained_judge = units.load_judge(results.parent, classes)
    val_names, _, val_masks = judge.read_split(root, "val")
    if args.quick:  # scoring 200 maps x 4 draws per generator would be most of the quick run's time
        val_names, val_masks = val_names[:QUICK_VAL_MAPS], val_masks[:QUICK_VAL_MAPS]
    configs = [config_runs.retargeted_config(c, family, root, args.iters, work_dir / name / "configs")
               for c in args.configs]
    compare_dir = work_dir / name / "compare"
    if not all((results / f"{c.stem}_seed{seed}.json").is_file() for c in configs):
        seeds = [s for s in args.seeds if s <= seed]  # the report of tools/compare.py grows seed by seed
        if config_runs.run_compare(configs, seeds, compare_dir, args.core, log) not in (0, 1):
            raise SystemExit("tools/compare.py was stopped: rerun the same command to resume")
    for config in configs:
        run_dir = compare_dir / config.stem / f"seed{seed}"
        if (run_dir / "checkpoints" / f"iter_{args.iters}.pth").is_file():
            unit(f"{config.stem}_seed{seed}",
                 partial(units.config_unit, run_dir, args.iters, trained_judge, val_names, val_masks, classes))
        else:
            log(f"{name}: {config.stem} seed {seed} did not finish (see {run_dir}/train.log); going on")
    _, images, masks = judge.read_split(root, "train")
    for variant, bf16 in PLAIN:
        label = f"plain_{variant}_{'bf16' if bf16 else 'fp32'}"
        folder = work_dir / name / "plain" / f"{label}_seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        unit(f"{label}_seed{seed}", partial(units.plain_unit, variant, bf16, seed, (images, masks, val_names, val_masks),
                                            classes, args.iters, folder, trained_judge, log))


def main(argv=None) -> int:
    args = parse_args(argv)
    work_dir = Path(args.work_dir).resolve()
    settings = {"iters": args.iters, "judge_iters": args.judge_iters, "quick": args.quick}
    try:
        claim_work_dir(work_dir, settings)
        import torch
        torch.set_num_threads(1)
        os.sched_setaffinity(0, {args.core})
        log(f"work dir {work_dir}, families {args.families}, seeds {args.seeds}, {args.iters} iterations, core {args.core}")
        for seed, name in schedule(args.families, args.seeds):
            run_family_seed(args, work_dir, name, seed, settings)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    markdown, _ = report.write_report(work_dir, args.families, families.HELD_OUT, settings)
    log(f"report: {markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

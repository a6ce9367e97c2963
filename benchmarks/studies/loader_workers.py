"""Is `num_workers: auto` right when decoding is the heavy part? A measurement, not a test.

The shipped VOC config (configs/segmentation/unet_voc.yaml: batch 8, SmallestMaxSize 288 + crop
256 + flip) with a smaller UNet than its own (16 channels depth 3 by default against 32 and 4: on
a CPU the shipped network takes seconds per step, and the smaller the network, the larger the
share of decoding, the case the `auto` rule has to get right) trains on a VOC-layout folder of photo-sized JPEGs
(500x375 by default, as Pascal VOC's; the built-in shapes with their noise, so the JPEGs carry
texture) with the data settings a user might pick, each process limited to 1 or 2 cores with
`taskset` (torch's threads and the framework's `auto` rules both follow the affinity mask):

- shipped defaults: `cache: auto` (the folder fits, so it is decoded once) and `num_workers: auto`;
- files, N workers: `cache: null`, what a folder too large to cache gets, with N = 0, 1, 2
  (`auto` picks 0 on up to 4 cores: the compute threads already use every core).

Runs alternate round after round; the table shows medians of the time per iteration (log
windows, the first dropped), of the data wait per iteration (what the training loop waited for
the next batch) and of the whole process, and each variant against what `auto` picked.

    python benchmarks/studies/loader_workers.py [--images 200] [--iters 30] [--rounds 2] [--cores 1 2] [--channels 16 --depth 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.helpers.folder_data import make_voc  # noqa: E402
from benchmarks.release.speed import REPO, run_measured  # noqa: E402

WINDOW = 5  # iterations per log window


def write_config(folder: Path, voc: Path, iters: int, channels: int, depth: int) -> Path:
    config = {
        "_base_": [str(REPO / "configs/segmentation/unet_voc.yaml")],
        "device": "cpu",
        "task": {"model": {"base_channels": channels, "depth": depth}},
        # the loader defaults, named, so the variants can override them
        "data": {"train": {"dataset": {"root": str(voc)}, "cache": "auto", "num_workers": "auto"}, "val": None},
        "metrics": [],
        "train": {"max_iters": iters, "val_interval": 0, "ckpt_interval": iters, "log_interval": WINDOW,
                  "progress_bar": False, "best_metric": None},
    }
    path = folder / "unet_voc_bench.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def variants(config: Path, work: Path, cores: int) -> dict[str, list[str]]:
    pinned = ["taskset", "-c", ",".join(str(core) for core in sorted(os.sched_getaffinity(0))[:cores])]
    train = [*pinned, sys.executable, str(REPO / "tools/train.py"), "--config", str(config),
             "--work-dir", str(work / f"run_{cores}"), "--overwrite"]
    commands = {"shipped defaults (cache auto, workers auto)": train}
    for workers in (0, 1, 2):
        commands[f"files, {workers} worker{'s' if workers != 1 else ''}"] = [
            *train, "data.train.cache=null", f"data.train.num_workers={workers}"]
    return commands


def log_times(stdout: str) -> tuple[list[float], list[float]]:
    """(iteration times, data waits) per log window, from the framework's log lines."""
    iteration = [float(t) for t in re.findall(r"time (\d+\.\d+)s", stdout)]
    data = [float(t) for t in re.findall(r"data (\d+\.\d+)s", stdout)]
    return iteration, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--channels", type=int, default=16, help="UNet base_channels (the shipped config: 32)")
    parser.add_argument("--depth", type=int, default=3, help="UNet depth (the shipped config: 4)")
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", default=str(REPO / "work_dirs/benchmarks/loader_workers.json"))
    args = parser.parse_args()
    available = len(os.sched_getaffinity(0))
    if max(args.cores) > available:
        parser.error(f"--cores {max(args.cores)}: this process may use {available} cores")

    from framework.data.loader import auto_workers

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        voc = make_voc(folder / "voc", count=args.images, size=(args.height, args.width))
        config = write_config(folder, voc, args.iters, args.channels, args.depth)
        plan = {cores: variants(config, folder, cores) for cores in args.cores}
        runs = {cores: {name: [] for name in commands} for cores, commands in plan.items()}
        load_before = os.getloadavg()[0]
        for _ in range(args.rounds):  # alternated, so a busy spell on the machine hits every variant
            for cores, commands in plan.items():
                for name, command in commands.items():
                    result = run_measured(command)
                    iteration, data = log_times(result["stdout"])
                    runs[cores][name].append({"wall": result["wall"], "iter": statistics.median(iteration[1:]),
                                              "data": statistics.median(data[1:])})
                    print(f"{cores} cores, {name}: {runs[cores][name][-1]}", flush=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores_available": available, "images": args.images,
               "size": [args.height, args.width], "iters": args.iters, "rounds": args.rounds,
               "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2), "cases": {}}
    print(f"\n{results['date']}  {args.images} JPEGs {args.width}x{args.height}, {args.iters} iterations, "
          f"{args.rounds} alternated rounds, medians; load {results['load_before']} -> {results['load_after']}")
    print(f"{'cores':>5s}  {'variant':44s} {'s/iter':>8s} {'data s/iter':>12s} {'wall s':>8s} {'x auto':>7s}")
    for cores, by_name in runs.items():
        summary = {name: {key: statistics.median(run[key] for run in values) for key in ("iter", "wall", "data")}
                   for name, values in by_name.items()}
        # What `auto` picks for a folder that is not cached, on this many cores (CPU training).
        auto_files = f"files, {auto_workers(None, cached=False, cores=cores)} worker"
        auto_name = next(name for name in summary if name.startswith(auto_files))
        for name, row in summary.items():
            ratio = row["iter"] / summary[auto_name]["iter"]
            print(f"{cores:5d}  {name:44s} {row['iter']:8.3f} {row['data']:12.4f} {row['wall']:8.1f} {ratio:7.2f}")
        results["cases"][str(cores)] = {"auto_for_files": auto_name, "variants": summary, "runs": by_name}
    print("x auto: time per iteration against the files variant that `num_workers: auto` picks on that many cores")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

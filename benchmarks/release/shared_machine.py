"""The Quickstart on a machine it shares (issue 53): alone, and beside one busy single-thread torch
process (a second run, a data job, a colleague's notebook). A measurement, not a test: run it on
an otherwise quiet machine.

    python benchmarks/release/shared_machine.py [--iters 200] [--rounds 3] [--variants auto pinned one passive]

Each variant is a whole `tools/train.py --config configs/segmentation/unet_shapes.yaml
train.max_iters=N` process (start-up included, OMP_NUM_THREADS removed from its environment):

    auto     the default, `threads: auto` (the cores this process may use, fewer while the machine is busy)
    pinned   `threads=<cores>`: what `auto` chose before it adapted (torch's own count on a quiet machine)
    one      `threads=1`
    passive  `threads=<cores>` with OMP_WAIT_POLICY=PASSIVE (threads sleep at barriers instead of spinning)

Variants alternate within each round; the table gives the median wall time per variant and
situation, its ratio to the best variant there, and the thread changes `auto` logged. The busy
process is `torch.set_num_threads(1)` multiplying 512x512 matrices in a loop, started before and
stopped after each beside-run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUSY = "import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\nwhile True:\n    a = (a @ a).tanh_()\n"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def variant_run(name: str, iters: int, work_dir: Path) -> tuple[list[str], dict]:
    cores = usable_cores()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    overrides = {"auto": [], "pinned": [f"threads={cores}"], "one": ["threads=1"], "passive": [f"threads={cores}"]}[name]
    if name == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    command = [sys.executable, str(REPO / "tools/train.py"), "--config", str(REPO / "configs/segmentation/unet_shapes.yaml"),
               "--work-dir", str(work_dir), f"train.max_iters={iters}", "train.progress_bar=false", *overrides]
    return command, env


def timed(command: list[str], env: dict, work_dir: Path) -> tuple[float, list[str]]:
    shutil.rmtree(work_dir, ignore_errors=True)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    log = (work_dir / "train.log").read_text()
    return took, re.findall(r"threads (\d+ -> \d+) \(", log)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["auto", "pinned", "one", "passive"],
                        choices=["auto", "pinned", "one", "passive"])
    parser.add_argument("--situations", nargs="+", default=["alone", "beside"], choices=["alone", "beside"])
    args = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    changes: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work_dir = Path(scratch) / "run"
        for round_index in range(args.rounds):
            for situation in args.situations:
                for name in args.variants:
                    busy = None
                    if situation == "beside":
                        busy = subprocess.Popen([sys.executable, "-c", BUSY], env={**os.environ, "OMP_NUM_THREADS": "1"})
                        time.sleep(2)  # its import done: the load is there from the run's start
                    try:
                        took, changed = timed(*variant_run(name, args.iters, work_dir), work_dir)
                    finally:
                        if busy is not None:
                            busy.kill()
                            busy.wait()
                    times.setdefault((situation, name), []).append(took)
                    changes.setdefault((situation, name), []).extend(changed)
                    print(f"round {round_index + 1} {situation:6} {name:8} {took:6.1f} s {'; '.join(changed)}", flush=True)
    print(f"\nThe Quickstart, {args.iters} iterations with start-up, {usable_cores()} usable cores, "
          f"medians of {args.rounds} rounds (whole-process seconds):\n")
    print("| situation | variant | median s | min..max | x best there | thread changes (auto) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for situation in args.situations:
        medians = {name: statistics.median(times[(situation, name)]) for name in args.variants}
        best = min(medians.values())
        for name in args.variants:
            runs = times[(situation, name)]
            seen = changes[(situation, name)]
            counted = "; ".join(f"{change} ({seen.count(change)}x)" for change in sorted(set(seen))) or "-"
            print(f"| {situation} | {name} | {medians[name]:.1f} | {min(runs):.1f}..{max(runs):.1f} | "
                  f"{medians[name] / best:.2f} | {counted} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

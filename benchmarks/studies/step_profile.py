"""What one training iteration does beyond a hand-written loop, counted, not timed: Python calls
(cProfile) and tensor operations (aten ops, through a dispatch mode) per iteration, the framework's
Trainer against the hand-written loops of benchmarks/release/fixed_cost.py on the same near-zero-compute
networks. Counts do not depend on the machine's load, so this finds the fixed cost on a busy
machine; fixed_cost.py times it on a quiet one.

    python benchmarks/studies/step_profile.py                    # both cases
    python benchmarks/studies/step_profile.py --cases segmentation --steps 200 --top 25

Prints, per case, the counts per iteration of each loop, the aten ops the framework adds (and
what they are), and the functions whose calls per iteration differ most; one JSON line at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.release.fixed_cost import gan_case, segmentation_case  # noqa: E402

CASES = {"segmentation": segmentation_case, "gan": gan_case}


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def python_calls(loop, steps: int) -> Counter:
    profile = cProfile.Profile()
    profile.enable()
    loop(steps)
    profile.disable()
    calls = Counter()
    for (file, line, name), row in pstats.Stats(profile).stats.items():
        where = name if file == "~" else f"{Path(file).parent.name}/{Path(file).name}:{line} {name}"
        calls[where] += row[1] / steps
    return calls


def aten_ops(loop, steps: int) -> Counter:
    counter = CountOps()
    with counter:
        loop(steps)
    return Counter({op: n / steps for op, n in counter.ops.items()})


def difference(ours: Counter, theirs: Counter, top: int) -> list[tuple[str, float]]:
    rows = [(key, ours[key] - theirs[key]) for key in set(ours) | set(theirs)]
    return sorted((row for row in rows if abs(row[1]) >= 0.005), key=lambda row: -abs(row[1]))[:top]


def profile_case(name: str, steps: int, top: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        handwritten, framework = CASES[name](str(Path(tmp) / name))
        handwritten(steps // 4), framework(steps // 4)  # warm-up: lazy initialisation out of the counts
        calls = {"handwritten": python_calls(handwritten, steps), "framework": python_calls(framework, steps)}
        ops = {"handwritten": aten_ops(handwritten, steps), "framework": aten_ops(framework, steps)}
    return {"python_calls_per_iter": {k: sum(v.values()) for k, v in calls.items()},
            "aten_ops_per_iter": {k: sum(v.values()) for k, v in ops.items()},
            "added_aten_ops": difference(ops["framework"], ops["handwritten"], top),
            "added_python_calls": difference(calls["framework"], calls["handwritten"], top)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--steps", type=int, default=200, help="iterations counted (log interval: 50)")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    results = {name: profile_case(name, args.steps, args.top) for name in args.cases}
    for name, row in results.items():
        print(f"{name}: python calls/iter {row['python_calls_per_iter']['handwritten']:.1f} hand-written, "
              f"{row['python_calls_per_iter']['framework']:.1f} framework; aten ops/iter "
              f"{row['aten_ops_per_iter']['handwritten']:.2f} / {row['aten_ops_per_iter']['framework']:.2f}")
        for op, count in row["added_aten_ops"]:
            print(f"   {count:+7.2f}  {op}")
        for where, count in row["added_python_calls"]:
            print(f"   {count:+7.2f}  {where}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""How long tools/compare.py takes for 2 configs x 3 seeds of a shortened Quickstart (the target:
at most 6 minutes on 2 cores). Run it on a quiet machine:

    python benchmarks/studies/compare_quickstart.py [--iters 300] [--jobs 2] [--out work_dirs/compare_quickstart]

The two configs: the Quickstart (configs/segmentation/unet_shapes.yaml) and the same at a third
of its learning rate (written next to the runs). The command it times is the one in
docs/tools.md; the output folder is replaced first, so every run is timed from scratch.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_SECONDS = 360


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=300, help="train.max_iters of each run")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "work_dirs/compare_quickstart")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    slower = args.out / "unet_lr1e-3.yaml"
    slower.write_text(f"_base_: [{REPO / 'configs/segmentation/unet_shapes.yaml'}]\noptim: {{lr: 1.0e-3}}\n")
    command = [sys.executable, str(REPO / "tools/compare.py"), "--configs",
               str(REPO / "configs/segmentation/unet_shapes.yaml"), str(slower), "--seeds", "0", "1", "2",
               "--jobs", str(args.jobs), "--work-dir", str(args.out / "runs"), f"train.max_iters={args.iters}",
               f"train.val_interval={max(args.iters // 3, 1)}"]
    print(" ".join(command), flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    took = time.perf_counter() - start
    print(f"compare: {took:.0f} s for 6 runs of {args.iters} iterations, {args.jobs} at a time "
          f"({os.cpu_count()} CPUs, load {load:.1f} at the start; target <= {TARGET_SECONDS} s: "
          f"{'met' if took <= TARGET_SECONDS else 'missed'}), exit status {result.returncode}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Where a pix2pix G+D step's time goes in oneDNN, float32 against bfloat16 autocast, on this CPU.

The shipped pix2pix networks (benchmarks/helpers/gan_networks.py's step: U-Net 16 channels 6 downs and
PatchGAN, instance norm, 64x64, batch 8) run in a child process per precision with
ONEDNN_VERBOSE=1; the execution times oneDNN reports after the warm-up steps are summed per
primitive kind (forward convolutions, backward-data, backward-weights, reorders between
PyTorch's plain layout and oneDNN's blocked one) and printed in ms per step, beside the step's
median time from a second child without the verbose log (the log itself slows the step).
It answers why bf16 gains less on one CPU than on another: without AMX, the weight-gradient
kernels and the reorders do not get faster in bf16 (docs/performance.md).

    python benchmarks/studies/onednn_breakdown.py [--steps 60] [--channels-last]
"""

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = "-- warm-up done --"


def kind_of(fields: list[str]) -> str:
    """'forward', 'backward_data', 'backward_weights' or 'reorder' from one exec line's fields."""
    primitive, propagation = fields[5], fields[7]
    if primitive == "reorder":
        return "reorder"
    if primitive in ("convolution", "deconvolution"):
        return {"forward_training": "forward", "forward_inference": "forward"}.get(propagation, propagation)
    return "other"


def child(precision: str, channels_last: bool, steps: int) -> None:
    sys.path.insert(0, str(REPO))
    from benchmarks.helpers.gan_networks import step_ms

    def mark():
        print(MARKER, flush=True)

    ms = step_ms("pix2pix", "in", channels_last, steps, bf16=precision == "bf16", after_warmup=mark)
    print(json.dumps({"step_ms": ms}), flush=True)


def run_child(precision: str, channels_last: bool, steps: int, verbose: bool) -> tuple[float, dict[str, float]]:
    env = {**os.environ, "ONEDNN_VERBOSE": "1" if verbose else "0"}
    command = [sys.executable, __file__, "--child", precision, "--steps", str(steps)]
    output = subprocess.run(command + (["--channels-last"] if channels_last else []), env=env,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    measured, per_kind = False, collections.Counter()
    for line in output:
        if line == MARKER:
            measured = True
        elif measured and line.startswith("onednn_verbose,") and ",primitive,exec," in line:
            fields = line.split(",")
            per_kind[kind_of(fields)] += float(fields[-1])  # ms
    step = json.loads(output[-1])["step_ms"]
    timed_steps = steps - 5
    return step, {kind: total / timed_steps for kind, total in per_kind.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="steps per child, the first 5 not counted")
    parser.add_argument("--channels-last", action="store_true", help="networks and inputs in NHWC")
    parser.add_argument("--child", choices=["float32", "bf16"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.channels_last, args.steps)
        return
    kinds = ["forward", "backward_data", "backward_weights", "reorder", "other"]
    print(f"{'precision':9s} {'step ms':>8s} " + " ".join(f"{k:>16s}" for k in kinds) + "   (oneDNN ms per step)")
    for precision in ("float32", "bf16"):
        step, _ = run_child(precision, args.channels_last, args.steps, verbose=False)
        _, per_kind = run_child(precision, args.channels_last, args.steps, verbose=True)
        print(f"{precision:9s} {step:8.1f} " + " ".join(f"{per_kind.get(k, 0.0):16.2f}" for k in kinds))


if __name__ == "__main__":
    main()

"""How close to the machine the shipped configs train (issue 53): achieved FLOP/s against the
CPU's measured float32 peak. A measurement, not a test: run it on an otherwise quiet machine.

    python benchmarks/release/utilisation.py [--configs unet oasis spade pix2pix cyclegan] [--iters 30]
        [--variants default compile channels_last] [--threads N]

Peak: the best of 5 float32 matmuls of 4096x4096 (2 x 4096^3 FLOPs each) at the run's thread
count, what the BLAS reaches on this CPU.

Per config and variant: the Trainer tools/train.py builds (in this process, float32, no
evaluation), a few warm-up iterations, then
- the FLOPs of one training iteration counted by torch's own counter (torch.utils.flop_counter:
  forward and backward of every network the task runs, every optimizer's step excluded; a
  multiply-add is 2 FLOPs), and
- the median seconds per iteration over blocks of `--iters` iterations;
utilisation = FLOPs per iteration / seconds per iteration / peak. `compile` is `compile=true`
(inductor; its compilation is in the warm-up, not in the figure, and the seconds it took are
printed), `compile_nchw` the same with inductor's `layout_optimization` off (it computes convolutions
channels-last by default), `channels_last` is `channels_last=true`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from in_process import build_quiet_trainer, time_framework  # noqa: E402

NO_EVALUATION = ["amp.enabled=false", "train.val_interval=0", "train.ckpt_interval=0", "train.log_interval=1000000",
                 "train.progress_bar=false", "loggers=[]"]
CONFIGS = {  # name -> (config, overrides that take evaluation's needs away: a segmenter checkpoint)
    "unet": ("configs/segmentation/unet_shapes.yaml", []),
    "oasis": ("configs/synthesis/oasis_textures.yaml", ["metrics=[]", "train.best_metric=null"]),
    "spade": ("configs/synthesis/spade_textures.yaml", ["metrics=[]", "train.best_metric=null"]),
    "pix2pix": ("projects/pix2pix/configs/pix2pix_shapes.yaml", []),
    "cyclegan": ("projects/cyclegan/configs/cyclegan_shapes.yaml", []),
}
VARIANTS = {"default": [], "compile": ["compile=true"], "channels_last": ["channels_last=true"],
            # inductor computes convolutions channels-last unless told not to (its layout_optimization)
            "compile_nchw": ["compile={options: {layout_optimization: false}}"]}


def matmul_peak(size: int = 4096, repeats: int = 5) -> float:
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up: the BLAS's threads and buffers
    best = min(timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size**3 / best


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def iteration_flops(trainer) -> int:
    """FLOPs of the trainer's next iteration (forward and backward; its optimizer steps too, which
    the counter does not see: foreach/fused updates are not matmuls or convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        time_framework(trainer, 1)
    return counter.get_total_flops()


def measure(name: str, variant: str, iters: int, rounds: int) -> dict:
    config, overrides = CONFIGS[name]
    with tempfile.TemporaryDirectory() as work_dir:
        trainer = build_quiet_trainer(REPO / config, NO_EVALUATION + overrides + VARIANTS[variant], work_dir)
        warm_up = timed(lambda: time_framework(trainer, 3))
        flops = iteration_flops(trainer) if not variant.startswith("compile") else None
        seconds = statistics.median(time_framework(trainer, iters) for _ in range(rounds))
    return {"config": name, "variant": variant, "flops": flops, "seconds": seconds, "warm_up": warm_up}


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--variants", nargs="+", default=["default"], choices=list(VARIANTS))
    parser.add_argument("--iters", type=int, default=30, help="iterations per timed block")
    parser.add_argument("--rounds", type=int, default=3, help="timed blocks (the median is reported)")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    peak = matmul_peak()
    print(f"float32 peak (4096^2 matmul, {threads} threads): {peak / 1e9:.1f} GFLOP/s", flush=True)
    print("| config | variant | GFLOP per iteration | s per iteration | GFLOP/s | of peak | warm-up s (3 iterations) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    counted: dict[str, int] = {}
    variants = ["default"] + [v for v in args.variants if v != "default"]  # default counts the FLOPs first
    for name in args.configs:
        for variant in variants:
            result = measure(name, variant, args.iters, args.rounds)
            flops = result["flops"] or counted.get(name)  # a compiled graph hides its ops from the counter
            counted[name] = flops
            achieved = flops / result["seconds"]
            print(f"| {name} | {variant} | {flops / 1e9:.2f} | {result['seconds']:.3f} | {achieved / 1e9:.1f} | "
                  f"{achieved / peak:.0%} | {result['warm_up']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Seconds per iteration and peak memory of the framework against the plain scripts, on one device,
per precision, memory format and torch.compile: the speed step of benchmarks/gpu/gpu_check.py.

    python benchmarks/gpu/gpu_speed.py --json speed.json                      # on the GPU, every case
    python benchmarks/gpu/gpu_speed.py --device cpu --cases pix2pix --variants float32 --block 2 --rounds 1

Cases, each with the plain script of benchmarks/plain/ that trains the same network:
- `quickstart`: configs/segmentation/unet_shapes.yaml (SyntheticShapes, batch 8) against
  plain/segmentation.py at batch 8 on a VOC-layout folder of the same shapes (the plain script
  reads folders only; both have their samples decoded in memory);
- `voc_folder`: the VOC-layout config of benchmarks/release/speed.py (VOCSegmentation, batch 16) against
  plain/segmentation.py on the same folder;
- `pix2pix`: benchmarks/release/speed.py's pix2pix config (A|B JPEG pairs, batch 8) against plain/pix2pix.py.

Variants (`VARIANTS`): float32 and AMP (bfloat16 autocast in both: the plain scripts' `bf16`,
the framework's `amp.enabled=true amp.dtype=bfloat16`), NCHW and channels_last (the weights, as
`channels_last: true` does), and torch.compile (`compile: true`; the plain networks' `.compile()`).
The compiled variant runs last: its warm-up block compiles, and a step budget that runs out there
keeps the figures of the others (the JSON is rewritten after every variant).

Per case and variant, the plain loop runs first, then the framework's Trainer, in this process,
each freed before the next, so `torch.cuda.max_memory_allocated()` (reset at each loop's start)
is that loop's own peak. Each: one warm-up block, then `--rounds` blocks of `--block` iterations,
the device synchronised around each block; seconds per iteration is the median block's.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CASES = {"quickstart": ("segmentation", 8), "voc_folder": ("segmentation", 16), "pix2pix": ("pix2pix", 8)}
VARIANTS = {  # name: (AMP, channels_last, compile)
    "float32": (False, False, False),
    "amp": (True, False, False),
    "amp + channels_last": (True, True, False),
    "float32 + channels_last": (False, True, False),
    "amp + channels_last + compile": (True, True, True),
}
QUICKSTART = REPO / "configs/segmentation/unet_shapes.yaml"


def framework_overrides(case: str, device: str, amp: bool, channels_last: bool, compiled: bool) -> list[str]:
    precision = ["amp.enabled=true", "amp.dtype=bfloat16"] if amp else ["amp.enabled=false"]
    common = [f"device={device}", *precision, f"channels_last={str(channels_last).lower()}",
              f"compile={str(compiled).lower()}", "train.ckpt_interval=0", "train.val_interval=0",
              "train.progress_bar=false"]
    if case == "quickstart":  # the plain folder's 300 images, no evaluation; its other settings as shipped
        common += ["data.train.dataset.num_samples=300", "data.val=null", "metrics=[]", "train.best_metric=null"]
    return common


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_mb(device) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def time_blocks(run_block, device, block: int, rounds: int) -> list[float]:
    """Seconds per iteration of each block after one of warm-up (where torch.compile compiles)."""
    times = []
    for index in range(rounds + 1):
        synchronize(device)
        start = time.perf_counter()
        run_block(block)
        synchronize(device)
        if index:
            times.append((time.perf_counter() - start) / block)
    return times


def plain_figures(script: str, root: Path, batch: int, device, amp, channels_last, compiled, block, rounds) -> dict:
    import importlib.util
    import itertools

    sys.path.insert(0, str(REPO / "benchmarks/plain"))  # as the plain scripts run: `from networks import ...`
    spec = importlib.util.spec_from_file_location(f"plain_{script}", REPO / f"benchmarks/plain/{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reset_peak(device)
    state = module.build(str(root), device, channels_last=channels_last, compile=compiled)
    steps = module.training_steps(*state, batch, device, amp)
    times = time_blocks(lambda count: list(itertools.islice(steps, count)), device, block, rounds)
    return {"s_per_iter": statistics.median(times), "peak_mb": peak_mb(device)}  # its tensors freed on return


def framework_figures(config: Path, overrides: list[str], work_dir: Path, device, block, rounds) -> dict:
    from benchmarks.release.in_process import build_quiet_trainer, time_framework

    reset_peak(device)
    trainer = build_quiet_trainer(config, overrides, str(work_dir))
    times = time_blocks(lambda count: time_framework(trainer, count), device, block, rounds)
    return {"s_per_iter": statistics.median(times), "peak_mb": peak_mb(device),
            "precision": str(trainer.amp_dtype or "torch.float32").removeprefix("torch.")}


def measure(args, folder: Path, write) -> dict:
    import torch
    import torch._dynamo

    from benchmarks.helpers.folder_data import make_aligned_pairs, make_voc
    from benchmarks.release.speed import write_configs

    device = torch.device(args.device)
    roots = {"voc": make_voc(folder / "voc", args.images, args.size),
             "pairs": make_aligned_pairs(folder / "pairs", args.images, args.size)}
    configs = write_configs(folder, roots["voc"], roots["pairs"], dict.fromkeys(("segmentation", "pix2pix"), 10**9), args.device)
    configs["quickstart"], configs["voc_folder"] = QUICKSTART, configs["segmentation"]
    results = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "block": args.block, "rounds": args.rounds, "cases": {}}
    for variant in args.variants:
        amp, channels_last, compiled = VARIANTS[variant]
        for case in args.cases:
            script, batch = CASES[case]
            root = roots["pairs" if script == "pix2pix" else "voc"]
            torch._dynamo.reset()  # each variant compiles its own networks
            row = {"plain": plain_figures(script, root, batch, device, amp, channels_last, compiled,
                                          args.block, args.rounds)}
            overrides = framework_overrides(case, args.device, amp, channels_last, compiled)
            row["framework"] = framework_figures(configs[case], overrides, folder / f"{case}_{len(results)}", device,
                                                 args.block, args.rounds)
            row["ratio"] = row["framework"]["s_per_iter"] / row["plain"]["s_per_iter"]
            results["cases"].setdefault(case, {})[variant] = row
            print(f"{time.strftime('%H:%M:%S')}  {case}, {variant}: plain {row['plain']['s_per_iter'] * 1e3:.2f} ms, "
                  f"framework {row['framework']['s_per_iter'] * 1e3:.2f} ms, x{row['ratio']:.3f}", flush=True)
            write(results)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--block", type=int, default=20, help="iterations per timed block")
    parser.add_argument("--rounds", type=int, default=3, help="timed blocks per loop, after one of warm-up")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--size", type=int, default=64, help="a multiple of 64 (pix2pix's U-Net halves it 6 times)")
    parser.add_argument("--json", required=True, help="written after every variant")
    args = parser.parse_args(argv)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        measure(args, Path(tmp), lambda results: out.write_text(json.dumps(results, indent=1)))


if __name__ == "__main__":
    main()

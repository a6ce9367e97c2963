"""Mixed precision with two optimizers (a GAN's G and D, one GradScaler): the AMP step of
benchmarks/gpu/gpu_check.py. In one process, on one device, for pix2pix and CycleGAN:

1. Overflow, float16: after a few iterations, an infinite gradient is planted in the parameters of
   one optimizer at a time (a hook on one parameter, for one iteration). That optimizer's step
   must be skipped (its weights unchanged), the other's taken (its weights moved), the scale
   halved once, and the next iterations must leave every weight and loss finite.
2. Quality on a short run: the validation metric of float16 and bfloat16 runs against the spread
   of float32 runs over `--seeds`; a reduced precision "holds" when it is within that range or
   better than all of it (benchmarks/quality/amp_quality.py's rule, there for bf16 on the CPU).

    python benchmarks/gpu/gpu_amp_gan.py --json amp_gan.json                 # on the GPU
    python benchmarks/gpu/gpu_amp_gan.py --device cpu --tasks pix2pix --iters 4 --seeds 0 --json /tmp/a.json
    python benchmarks/gpu/gpu_amp_gan.py --device cpu --checks overflow --json /tmp/a.json task.generator.base_channels=8

Prints one line per check; the JSON (rewritten after each) holds every figure and `ok` per check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TASKS = {  # config, metric (higher is better), iterations of the short run
    "pix2pix": ("projects/pix2pix/configs/pix2pix_shapes.yaml", "PSNR", 150),
    "cyclegan": ("projects/cyclegan/configs/cyclegan_shapes.yaml", "PSNR_ab", 200),
}
PRECISIONS = {"float32": ["amp.enabled=false"], "float16": ["amp.enabled=true", "amp.dtype=float16"],
              "bfloat16": ["amp.enabled=true", "amp.dtype=bfloat16"]}


def overrides(task: str, device: str, precision: str, seed: int, iters: int) -> list[str]:
    common = [f"device={device}", f"seed={seed}", *PRECISIONS[precision], f"train.max_iters={iters}",
              f"train.val_interval={iters}", "train.val_at_start=false", "train.ckpt_interval=0",
              "train.progress_bar=false", f"train.log_interval={max(1, iters // 2)}"]
    if task == "cyclegan":  # the linear decay starts within the short run, as in the full one
        common += [f"optimizers.{name}.scheduler.decay_start={max(1, iters // 2)}"
                   for name in ("generators", "discriminators")]
    return common


def build(task: str, args, precision: str, seed: int, work_dir: Path, iters: int):
    from benchmarks.release.in_process import build_quiet_trainer

    return build_quiet_trainer(REPO / TASKS[task][0],
                               [*overrides(task, args.device, precision, seed, iters), *args.overrides], str(work_dir))


def train(trainer, iterations: int) -> None:
    trainer.max_iters += iterations
    trainer.fit()


def weights(trainer, name: str) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.optim.params(name)]


def all_finite(trainer) -> bool:
    return all(bool(p.isfinite().all()) for p in trainer.task.parameters())


def overflow_check(task: str, args, work_dir: Path) -> dict:
    """Per optimizer: an infinite gradient in its parameters skips its step alone."""
    trainer = build(task, args, "float16", 0, work_dir, 10**6)
    scaler, names = trainer.optim.scaler, trainer.optim.names
    train(trainer, 3)
    result = {"optimizers": {}, "ok": scaler is not None}
    for planted in names:
        before = {name: weights(trainer, name) for name in names}
        scale = scaler.get_scale()
        first = next(p for p in trainer.optim.params(planted) if p.requires_grad)
        handle = first.register_hook(lambda grad: grad * float("inf"))
        train(trainer, 1)
        handle.remove()
        moved = {name: any(not torch.equal(a, b) for a, b in zip(before[name], weights(trainer, name)))
                 for name in names}
        halved = scaler.get_scale() == scale * scaler.get_backoff_factor()
        train(trainer, 5)  # after the overflow: training goes on, finite
        finite = all_finite(trainer)
        ok = (not moved[planted]) and all(moved[n] for n in names if n != planted) and halved and finite
        result["optimizers"][planted] = {"skipped": not moved[planted],
                                         "others_stepped": all(moved[n] for n in names if n != planted),
                                         "scale_halved": halved, "finite_after": finite, "ok": ok}
        result["ok"] = result["ok"] and ok
    return result


def final_metric(trainer, metric: str) -> float:
    records = (Path(trainer.work_dir) / "metrics.jsonl").read_text().splitlines()
    return json.loads(records[-1])[metric]


def quality(task: str, args, folder: Path) -> dict:
    _, metric, default_iters = TASKS[task]
    iters = args.iters or default_iters
    runs: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for seed in args.seeds:
        for precision in PRECISIONS:
            if precision != "float32" and seed != args.seeds[0]:
                continue  # the spread is float32's; one run of each reduced precision
            if precision == "bfloat16" and args.device.startswith("cuda") and not torch.cuda.is_bf16_supported(False):
                continue
            trainer = build(task, args, precision, seed, folder / f"{task}_{precision}_{seed}", iters)
            train(trainer, iters)
            runs[precision].append(final_metric(trainer, metric))
    low, high = min(runs["float32"]), max(runs["float32"])
    result = {"metric": metric, "iterations": iters, "float32": runs["float32"], "float32_range": [low, high]}
    for precision in ("float16", "bfloat16"):
        if runs[precision]:
            value = statistics.mean(runs[precision])
            result[precision] = {"value": value, "holds": value >= low}  # within the range, or above it
    result["ok"] = all(result[p]["holds"] for p in ("float16", "bfloat16") if p in result)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="float32 seeds: the spread")
    parser.add_argument("--iters", type=int, help="iterations of the short runs (default: per task)")
    parser.add_argument("--checks", nargs="+", choices=["overflow", "quality"], default=["overflow", "quality"])
    parser.add_argument("--json", required=True)
    parser.add_argument("overrides", nargs="*", help="key=value overrides of every run (smaller networks for a CPU check)")
    args = parser.parse_args(argv)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: dict = {"device": args.device, "checks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            for check, run, folder in (("overflow", overflow_check, Path(tmp) / f"{task}_overflow"),
                                       ("quality", quality, Path(tmp))):
                if check not in args.checks:
                    continue
                start = time.perf_counter()
                figures = run(task, args, folder)
                figures["seconds"] = round(time.perf_counter() - start, 1)
                results["checks"][f"{task} {check}"] = figures
                out.write_text(json.dumps(results, indent=1))
                print(f"{time.strftime('%H:%M:%S')}  {task} {check}: {'ok' if figures['ok'] else 'FAILED'} "
                      f"{json.dumps({k: v for k, v in figures.items() if k != 'ok'})}", flush=True)
    return 0 if all(c["ok"] for c in results["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

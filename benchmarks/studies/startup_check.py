"""What the start-up check (framework/engine/startup_check.py) adds to a run's start, per config:
the first two samples through the pipeline, and the first step's forward on them (with the
state put back), against one training step of the config's own batch for scale.

    python benchmarks/studies/startup_check.py [--repeats 5] [--device cpu] [CONFIG ...]

Prints the median of `repeats` in milliseconds per config. Measure on a quiet machine: on a
loaded one the numbers say little. The check runs once per run; nothing of it is in the loop.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from framework.config import import_custom_modules, load_config, to_plain  # noqa: E402
from framework.engine.build import build_loaders, build_optim, build_task, select_device  # noqa: E402
from framework.engine.evaluation import move_to_device  # noqa: E402
from framework.engine.startup_check import check_first_step, first_training_batch  # noqa: E402

CONFIGS = ["configs/segmentation/unet_shapes.yaml", "projects/pix2pix/configs/pix2pix_shapes.yaml",
           "projects/pix2pix/configs/pix2pixhd_shapes.yaml"]


def median_ms(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(config: str, device: str, repeats: int) -> dict:
    cfg = load_config(str(REPO / config), [f"device={device}", "data.train.num_workers=0"])
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    device = select_device(plain["device"])
    train_loader, val_loader = build_loaders(plain, device)
    task = build_task(plain, device).train()
    samples = median_ms(lambda: first_training_batch(train_loader, val_loader, device), repeats)
    batch = first_training_batch(train_loader, val_loader, device)
    forward = median_ms(lambda: check_first_step(task, batch, plain["task"]), repeats)
    optim = build_optim(plain, task, device, 10, None)
    full = move_to_device(next(iter(train_loader)), device)
    step = median_ms(lambda: task.train_iteration([full], optim), repeats)
    return {"samples": samples, "first step forward": forward,
            f"one training step (batch {train_loader.batch_size})": step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", default=CONFIGS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    for config in args.configs:
        times = measure(config, args.device, args.repeats)
        print(f"{config}: " + ", ".join(f"{name} {value:.1f} ms" for name, value in times.items()))


if __name__ == "__main__":
    main()

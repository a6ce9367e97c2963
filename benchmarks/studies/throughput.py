"""Training throughput (images/s) of the framework against a hand-written PyTorch loop, and
of the framework on 1 and 2 CPU processes (gloo, torchrun). A measurement, not a test.

    python benchmarks/studies/throughput.py [--iters 200] [--batch 8] [--repeats 3]

Every variant trains the Quickstart's UNet on the synthetic shapes with the same optimizer,
batch and data. Each run reports the median seconds per iteration over its log windows
(the first window, with warm-up, is dropped); the table shows the median over repeats.
Run it on a quiet machine: other processes on these cores change the absolute numbers,
not what the ratios say about the framework's overhead.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"


def framework_run(processes: int, iters: int, batch: int, threads: int) -> float:
    """Median seconds per iteration of tools/train.py, read from its log lines."""
    with tempfile.TemporaryDirectory() as work_dir:
        args = [str(REPO / "tools/train.py"), "--config", str(CONFIG), "--work-dir", work_dir, "device=cpu",
                f"train.max_iters={iters}", "train.log_interval=20", "train.val_interval=0",
                f"train.ckpt_interval={iters}", f"data.train.batch_size={batch}", "data.train.num_workers=1",
                "train.progress_bar=false", "channels_last=false",  # the hand-written loop's format
                "amp.enabled=false"]  # and its precision
        if processes == 1:
            command = [sys.executable, *args]
        else:
            command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
                       "--master_addr=127.0.0.1", "--master_port=29533", *args]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    times = [float(t) for t in re.findall(r"time (\d+\.\d+)s", out)]
    return statistics.median(times[1:])


def handwritten_run(iters: int, batch: int, threads: int) -> float:
    """The same training in a plain loop: DataLoader, forward, loss, backward, step."""
    code = f"""
import time, statistics, torch
from torch.utils.data import DataLoader
import framework
from framework.data.shapes import SyntheticShapes
from framework.models.unet import UNet
torch.manual_seed(0)
data = SyntheticShapes(num_samples=2000, size=64, pipeline=[])
loader = DataLoader(data, batch_size={batch}, shuffle=True, num_workers=1, drop_last=True, persistent_workers=True)
model = UNet(in_channels=3, num_classes=4, base_channels=16, depth=3, norm="bn")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4, fused=True)
mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
windows, start, it = [], time.perf_counter(), 0
while it < {iters}:
    for batch in loader:
        image = (batch["image"].float() - mean) / std
        loss = torch.nn.functional.cross_entropy(model(image), batch["mask"], ignore_index=255)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        it += 1
        if it % 20 == 0:
            loss.item()
            windows.append((time.perf_counter() - start) / 20)
            start = time.perf_counter()
        if it == {iters}:
            break
print(statistics.median(windows[1:]))
"""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8, help="per process")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    variants = {
        "hand-written loop, 1 process": lambda: handwritten_run(args.iters, args.batch, cores),
        "framework, 1 process": lambda: framework_run(1, args.iters, args.batch, cores),
        "framework, 2 processes": lambda: framework_run(2, args.iters, args.batch, max(cores // 2, 1)),
    }
    images_per_step = {"framework, 2 processes": 2 * args.batch}
    rows = {}
    for name, run in variants.items():
        seconds = statistics.median(run() for _ in range(args.repeats))
        rows[name] = images_per_step.get(name, args.batch) / seconds
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {cores} cores  load {os.getloadavg()[0]:.1f}  "
          f"{args.iters} iterations, batch {args.batch} per process, median of {args.repeats}")
    reference = rows["hand-written loop, 1 process"]
    for name, images_per_s in rows.items():
        print(f"{name:32s} {images_per_s:8.1f} images/s   x{images_per_s / reference:.2f} of hand-written")


if __name__ == "__main__":
    main()

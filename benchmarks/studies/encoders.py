"""Encoder-decoder segmenters: size, cost and speed, and a same-wall-time race on the shapes.

    python benchmarks/studies/encoders.py [--seconds 90] [--skip-table] [--skip-race]

Table: parameters, FLOPs of one 512x512 image (torch.utils.flop_counter, which counts a
multiply-add as 2 FLOPs; counted on the meta device so nothing runs), and CPU inference images/s at 256x256 (batch 4, NCHW, median of 5
timed forwards after a warm-up, `--threads` torch threads, 1 by default).

Race: the Quickstart's from-scratch UNet (configs/segmentation/unet_shapes.yaml) and
EncoderUNet-resnet18 from random weights, whole (decoder 128..16) and cut to the UNet's shape
(`encoder_depth: 3`, deepest map at stride 8, decoder 32..16), the same with an auxiliary head
on layer1 (`aux_loss_weight: 0.4, aux_stage: 1`), trained by tools/train.py on the
same shapes with the same recipe (AdamW 3e-3, warmup + poly schedule, batch 8, channels_last, `--threads`) for the
same wall time:
a short probe run measures each one's seconds per iteration, max_iters is set to fill
`--seconds` of training, and the mIoU of the final evaluation is read from metrics.jsonl.
The machine's load average is printed with each figure: other processes on these cores change
the absolute numbers; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import framework  # noqa: F401  (fills the registries)
from framework.registry import MODELS

MODELS_IN_TABLE = {
    "UNet (Quickstart, from scratch)": {"type": "UNet", "base_channels": 16, "depth": 3},
    "EncoderUNet-resnet18": {"type": "EncoderUNet", "encoder": "resnet18"},
    "EncoderUNet-resnet34": {"type": "EncoderUNet", "encoder": "resnet34"},
    "EncoderUNet-mobilenet_v3_large": {"type": "EncoderUNet", "encoder": "mobilenet_v3_large"},
    "EncoderUNet-efficientnet_b0": {"type": "EncoderUNet", "encoder": "efficientnet_b0"},
    "FPN-resnet50": {"type": "FPN", "encoder": "resnet50"},
    "DeepLabV3Plus-resnet50 (OS 16)": {"type": "DeepLabV3Plus", "encoder": "resnet50", "output_stride": 16},
}
UNET_CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
ENCODER_CONFIG = REPO / "configs/segmentation/encoder_unet_resnet34_shapes.yaml"
SAME_RECIPE = ["optim.lr=3.0e-3", "optim.param_groups=null", "hooks=[]", "channels_last=true",
               "task.model.encoder=resnet18", "task.model.encoder_weights=null",
               "+task.model.decoder_channels=[128, 64, 32, 16, 16]"]  # half the default widths: 64x64 images


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def flops_512(model: torch.nn.Module) -> int:
    model = model.to("meta").eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.empty(1, 3, 512, 512, device="meta"))
    return counter.get_total_flops()


def images_per_second(model: torch.nn.Module, batch: int = 4, size: int = 256, repeats: int = 5) -> float:
    model.eval()
    image = torch.randn(batch, 3, size, size)
    times = []
    with torch.inference_mode():
        model(image)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            model(image)
            times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


def table() -> None:
    print("| model | params (M) | GFLOPs at 512x512 | CPU images/s at 256x256 | speed vs UNet |")
    print("| --- | ---: | ---: | ---: | ---: |")
    reference = None
    for name, node in MODELS_IN_TABLE.items():
        model = MODELS.build({**node, "num_classes": 4})
        params = sum(p.numel() for p in model.parameters())
        speed = images_per_second(model)
        flops = flops_512(model)
        reference = reference or speed  # the first row, the from-scratch UNet
        print(f"| {name} | {params / 1e6:.1f} | {flops / 1e9:.1f} | {speed:.1f} | x{speed / reference:.2f} |"
              f"  <!-- {load()} -->", flush=True)


def train(config: Path, work_dir: str, overrides: list[str]) -> tuple[str, float]:
    command = [sys.executable, str(REPO / "tools/train.py"), "--config", str(config), "--work-dir", work_dir,
               "device=cpu", "train.progress_bar=false", *overrides]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(torch.get_num_threads())}
    start = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return out, time.perf_counter() - start


def seconds_per_iter(config: Path, overrides: list[str]) -> float:
    with tempfile.TemporaryDirectory() as work_dir:
        out, _ = train(config, work_dir, [*overrides, "train.max_iters=60", "train.log_interval=15",
                                          "train.val_interval=0", "train.ckpt_interval=60"])
    times = [float(t) for t in re.findall(r"time (\d+\.\d+)s", out)]
    return statistics.median(times[1:])  # the first window holds the warm-up


RACE = (("UNet (from scratch)", UNET_CONFIG, []),
        ("EncoderUNet-resnet18 (random init, decoder 128..16)", ENCODER_CONFIG, SAME_RECIPE),
        # The UNet's shape: its deepest map is at stride 8 (depth 3), and its widths are small.
        ("EncoderUNet-resnet18 (random init, encoder_depth 3, decoder 32..16)", ENCODER_CONFIG,
         [*SAME_RECIPE, "+task.model.encoder_depth=3", "task.model.decoder_channels=[32,16,16]"]),
        # and deep supervision: an auxiliary head on layer1 (stride 4), loss weight 0.4
        ("EncoderUNet-resnet18 (random init, encoder_depth 3, decoder 32..16, aux head on layer1)", ENCODER_CONFIG,
         [*SAME_RECIPE, "+task.model.encoder_depth=3", "task.model.decoder_channels=[32,16,16]",
          "+task.model.aux_loss_weight=0.4", "+task.model.aux_stage=1"]))


def race(seconds: float) -> None:
    for name, config, overrides in RACE:
        per_iter = seconds_per_iter(config, overrides)
        iters = max(int(seconds / per_iter), 60)
        with tempfile.TemporaryDirectory() as work_dir:
            _, wall = train(config, work_dir, [*overrides, f"train.max_iters={iters}", f"train.val_interval={iters}",
                                               f"train.ckpt_interval={iters}", "train.log_interval=50"])
            metrics = [json.loads(line) for line in Path(work_dir, "metrics.jsonl").read_text().splitlines()]
        print(f"{name}: {per_iter * 1000:.0f} ms/iter, {iters} iterations (~{iters * per_iter:.0f} s of training, "
              f"{wall:.0f} s with start-up and evaluation), mIoU {metrics[-1]['mIoU']:.4f}  [{load()}]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="training wall time of each race entry")
    parser.add_argument("--skip-table", action="store_true")
    parser.add_argument("--skip-race", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads everywhere (1: a shared machine's other jobs oversubscribe more)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, {load()}")
    if not args.skip_table:
        table()
    if not args.skip_race:
        race(args.seconds)


if __name__ == "__main__":
    main()

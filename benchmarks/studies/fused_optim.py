"""The optimizer step alone: torch's default (foreach) against the fused kernel the framework
chooses by default (framework/optim/fused.py, with_fused_default), on the parameters of
networks the configs train.

    python benchmarks/studies/fused_optim.py [--threads 2] [--repeats 30]

Each step runs on fixed random gradients; the median of `--repeats` timed steps after 3
warm-up steps is printed per network and optimizer, with the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import framework  # noqa: E402,F401  (fills the registries)
from framework.registry import MODELS  # noqa: E402

NETWORKS = {
    "UNet (Quickstart)": {"type": "UNet", "base_channels": 16, "depth": 3, "num_classes": 4},
    "EncoderUNet-resnet18": {"type": "EncoderUNet", "encoder": "resnet18", "num_classes": 4},
    "pix2pix U-Net generator": {"type": "UNetGenerator", "base_channels": 16, "num_downs": 6},
}
OPTIMIZERS = {
    "AdamW": lambda params, **kw: torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, **kw),
    "Adam": lambda params, **kw: torch.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999), **kw),
    "SGD momentum": lambda params, **kw: torch.optim.SGD(params, lr=1e-2, momentum=0.9, **kw),
}


def step_ms(params: list[torch.nn.Parameter], make, repeats: int, **kwargs) -> float:
    optimizer = make(params, **kwargs)
    times = []
    for _ in range(repeats + 3):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[3:]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import projects.pix2pix  # noqa: F401  (registers UNetGenerator)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| network | parameters (M) | optimizer | foreach (ms) | fused (ms) | fused speed-up |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for name, node in NETWORKS.items():
        params = list(MODELS.build(dict(node)).parameters())
        torch.manual_seed(0)
        for p in params:
            p.grad = torch.randn_like(p)
        count = sum(p.numel() for p in params) / 1e6
        for optimizer, make in OPTIMIZERS.items():
            foreach = step_ms(params, make, args.repeats, foreach=True)
            fused = step_ms(params, make, args.repeats, fused=True)
            print(f"| {name} | {count:.2f} | {optimizer} | {foreach:.2f} | {fused:.2f} | x{foreach / fused:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()

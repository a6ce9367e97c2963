"""Training steps per second of the Quickstart UNet in the default (NCHW) and the
channels_last (NHWC) memory format, on this machine's CPU or GPU. A measurement, not a test.

    python benchmarks/studies/channels_last.py [--steps 40] [--batch 8]

Reports the median over the steps after a 5-step warm-up; the config key `channels_last: true`
is the second variant.
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from framework.models.unet import UNet


def steps_per_second(channels_last: bool, steps: int, batch: int, device: torch.device) -> float:
    torch.manual_seed(0)
    model = UNet(in_channels=3, num_classes=4, base_channels=16, depth=3).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    image = torch.randn(batch, 3, 64, 64, device=device)
    target = torch.randint(0, 4, (batch, 64, 64), device=device)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = F.cross_entropy(model(image), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1 / statistics.median(times[5:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    default = steps_per_second(False, args.steps, args.batch, device)
    nhwc = steps_per_second(True, args.steps, args.batch, device)
    print(f"{device}: NCHW {default:.1f} steps/s, channels_last {nhwc:.1f} steps/s (x{nhwc / default:.2f})")


if __name__ == "__main__":
    main()

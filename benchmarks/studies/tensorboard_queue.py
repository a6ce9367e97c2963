"""How long the training loop waits to log a burst of scalars to TensorBoard, by the writer's
queue length (`SummaryWriter(max_queue=...)`; framework/engine/loggers/tensorboard.py uses 1000).

    python benchmarks/studies/tensorboard_queue.py [--scalars 20] [--logs 60]

Between logs the main thread computes for 40 ms (matrix products, which release the GIL, as a
training step does); each log adds `scalars` scalars at once, as a GAN's log line does. Prints
the median and mean time of a burst per queue length, two alternated rounds.
"""

import argparse
import statistics
import tempfile
import time

import torch
from torch.utils.tensorboard import SummaryWriter


def compute(milliseconds: float, x: torch.Tensor) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < milliseconds / 1000:
        x @ x


def bursts(max_queue: int, scalars: int, logs: int, x: torch.Tensor) -> list[float]:
    with tempfile.TemporaryDirectory() as folder:
        writer = SummaryWriter(folder, max_queue=max_queue)
        times = []
        for step in range(logs):
            compute(40, x)
            start = time.perf_counter()
            for k in range(scalars):
                writer.add_scalar(f"train/term_{k}", float(k), step)
            times.append(time.perf_counter() - start)
        writer.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scalars", type=int, default=20)
    parser.add_argument("--logs", type=int, default=60)
    args = parser.parse_args()
    x = torch.randn(256, 256)
    for round_ in (1, 2):
        for max_queue in (10, 1000):  # 10: SummaryWriter's default
            times = bursts(max_queue, args.scalars, args.logs, x)
            print(f"round {round_}, max_queue {max_queue:4d}: a burst of {args.scalars} scalars took "
                  f"{statistics.median(times) * 1e3:.3f} ms (median), {statistics.mean(times) * 1e3:.3f} ms (mean)")


if __name__ == "__main__":
    main()

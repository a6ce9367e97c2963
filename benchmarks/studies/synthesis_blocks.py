"""Speed of the semantic-synthesis building blocks on this machine (a measurement, not a test):

- SyntheticTextures: milliseconds to render one 64x64 sample (what a loader worker pays);
- SPADEGenerator: milliseconds per forward + backward at 64x64, batch 8, with the OASIS losses
  of a stand-in N+1-class discriminator output (the generator's cost alone: no D network here),
  float32, and bfloat16 autocast where the device supports it; `--spade-hidden` compares SPADE's
  128-wide shared conv with a narrower one, the main cost at small widths;
- the OASIS losses alone (class-balanced CE, fake CE, LabelMix consistency) per call.

    python benchmarks/studies/synthesis_blocks.py [--device cpu|cuda] [--steps 20] [--spade-hidden 128 32]

Medians over `--steps` after 3 warm-up steps. Figures from a busy shared machine are not
comparable with each other; rerun on a quiet one.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from framework.data import SyntheticTextures  # noqa: E402
from framework.losses.oasis import class_balanced_ce, fake_class_ce, labelmix_consistency, labelmix_mask  # noqa: E402
from framework.models.spade import SPADEGenerator, one_hot_labels  # noqa: E402

NUM_CLASSES = 7


def timed_ms(step, steps: int, device: torch.device) -> float:
    """Median milliseconds of `step()` over `steps` runs after 3 warm-up runs."""
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def render_ms(steps: int) -> float:
    dataset = SyntheticTextures(num_samples=10_000, size=64)
    counter = iter(range(10_000))
    return timed_ms(lambda: dataset.load_sample(next(counter)), steps, torch.device("cpu"))


def batch(device: torch.device):
    dataset = SyntheticTextures(num_samples=8, size=64, seed=1)
    labels = torch.stack([dataset[i]["mask"] for i in range(8)]).to(device)
    images = torch.stack([dataset[i]["image"] for i in range(8)]).to(device).float() / 127.5 - 1
    return labels, images


def generator_step_ms(device: torch.device, hidden: int, bf16: bool, steps: int) -> float:
    torch.manual_seed(0)
    generator = SPADEGenerator(num_classes=NUM_CLASSES, image_size=64, base_channels=16, num_up_layers=4,
                               noise_dim=16, spectral_norm=True, spade_hidden=hidden).to(device)
    labels, _ = batch(device)
    one_hot = one_hot_labels(labels, NUM_CLASSES)
    # A fixed stand-in for D's N+1-class logits, as a function of the image: the loss has a gradient.
    head = torch.nn.Conv2d(3, NUM_CLASSES + 1, 1).to(device)

    def step():
        generator.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            fake = generator(one_hot, torch.randn(8, 16, device=device))
            logits = head(fake)
        class_balanced_ce(logits, labels).backward()

    return timed_ms(step, steps, device)


def losses_ms(device: torch.device, steps: int) -> float:
    labels, images = batch(device)
    logits = [torch.randn(8, NUM_CLASSES + 1, 64, 64, device=device) for _ in range(3)]

    def step():
        mask = labelmix_mask(labels, NUM_CLASSES)
        return (class_balanced_ce(logits[0], labels) + fake_class_ce(logits[1], labels)
                + labelmix_consistency(logits[2], logits[0], logits[1], mask, labels))

    return timed_ms(step, steps, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--spade-hidden", type=int, nargs="+", default=[128, 32])
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads")
    print(f"SyntheticTextures 64x64 render: {render_ms(args.steps * 5):.2f} ms/sample")
    bf16_options = [False, True] if device.type == "cuda" and torch.cuda.is_bf16_supported() else [False]
    if device.type == "cpu":
        bf16_options = [False, True]  # bf16 autocast runs on any CPU, fast only with AMX/AVX512-BF16
    for hidden in args.spade_hidden:
        for bf16 in bf16_options:
            ms = generator_step_ms(device, hidden, bf16, args.steps)
            print(f"SPADEGenerator 64x64 batch 8 (base 16, 4 ups, noise 16, spade_hidden {hidden}, "
                  f"{'bf16' if bf16 else 'fp32'}): {ms:.1f} ms per forward+backward")
    print(f"OASIS losses (batch 8, 64x64, {NUM_CLASSES}+1 classes): {losses_ms(device, args.steps):.2f} ms")


if __name__ == "__main__":
    main()

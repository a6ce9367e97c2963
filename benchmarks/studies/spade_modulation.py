"""Fusing SPADE's normalise-and-modulate by hand, in eager PyTorch: does it pay? (a measurement)

SPADE computes norm(x) * (1 + gamma(h)) + beta(h) with gamma and beta two convs of the same
hidden features h. Two hand fusions suggest themselves, and this times each against the layer as
shipped inside the OASIS-style generator of configs/synthesis/oasis_textures.yaml (its widths,
64x64, batch 16 as the task runs it: real and LabelMix halves), forward and backward, float32:

- `addcmul`: torch.addcmul(beta, norm(x), 1 + gamma), one kernel for the multiply and the add;
- `one_conv`: gamma and beta from one conv of twice the channels (the two weights concatenated
  per call, so parameters and checkpoints stay as they are), split with chunk.

Whole-generator steps, not the layer alone: a layer alone keeps its tensors in the cache, a
step does not, and the modulation is bound by memory traffic. Variants alternate within each
round; medians of `--steps` steps after 3 warm-up steps, per round, then the median of rounds.

    python benchmarks/studies/spade_modulation.py [--threads 2] [--steps 10] [--rounds 3]

Figures and what they decided: docs/performance.md ("How close to the machine").
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from framework.models import spade  # noqa: E402

SHIPPED_FORWARD = spade.SPADE.forward


def addcmul_forward(self, x, labels):
    hidden = self.shared(F.interpolate(labels, size=x.shape[-2:], mode="nearest"))
    return torch.addcmul(self.beta(hidden), self.norm(x), 1 + self.gamma(hidden))


def one_conv_forward(self, x, labels):
    hidden = self.shared(F.interpolate(labels, size=x.shape[-2:], mode="nearest"))
    weight = torch.cat([self.gamma.weight, self.beta.weight])
    bias = torch.cat([self.gamma.bias, self.beta.bias])
    gamma, beta = F.conv2d(hidden, weight, bias, padding=self.gamma.padding).chunk(2, dim=1)
    return self.norm(x) * (1 + gamma) + beta


VARIANTS = {"as shipped": SHIPPED_FORWARD, "addcmul": addcmul_forward, "one_conv": one_conv_forward}


def generator_step(batch: int):
    """One forward + backward of the oasis_textures generator on a fixed batch."""
    torch.manual_seed(0)
    generator = spade.SPADEGenerator(num_classes=7, image_size=64, base_channels=32, num_up_layers=3,
                                     noise_dim=16, spade_hidden=32, spectral_norm=True)
    labels = spade.one_hot_labels(torch.randint(0, 7, (batch, 64, 64)), 7)
    noise = torch.randn(batch, 16)
    target = torch.randn(batch, 3, 64, 64)

    def step():
        generator.zero_grad(set_to_none=True)
        (generator(labels, noise) * target).mean().backward()

    return generator, step


def median_ms(step, steps: int) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def check_same_output(generator, batch: int) -> None:
    """Every variant computes the layer as shipped (to float32 rounding), or its time means nothing."""
    labels = spade.one_hot_labels(torch.randint(0, 7, (batch, 64, 64)), 7)
    noise = torch.randn(batch, 16)
    outputs = {}
    generator.eval()  # in training mode each forward moves BatchNorm's statistics and spectral norm's vectors
    for name, forward in VARIANTS.items():
        spade.SPADE.forward = forward
        with torch.no_grad():
            outputs[name] = generator(labels, noise)
    spade.SPADE.forward = SHIPPED_FORWARD
    generator.train()
    for name, output in outputs.items():
        torch.testing.assert_close(output, outputs["as shipped"], rtol=1e-4, atol=1e-5, msg=f"{name} differs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator, step = generator_step(args.batch)
    check_same_output(generator, args.batch)
    rounds = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, forward in VARIANTS.items():
            spade.SPADE.forward = forward
            rounds[name].append(median_ms(step, args.steps))
    spade.SPADE.forward = SHIPPED_FORWARD
    shipped = statistics.median(rounds["as shipped"])
    print(f"generator forward + backward, batch {args.batch}, 64x64, float32, {args.threads} thread(s), "
          f"median of {args.rounds} rounds of {args.steps} steps")
    print("| SPADE modulation | ms per step | rounds | against as shipped |\n| --- | --- | --- | --- |")
    for name, times in rounds.items():
        median = statistics.median(times)
        spread = ", ".join(f"{t:.0f}" for t in times)
        print(f"| {name} | {median:.1f} | {spread} | x{median / shipped:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

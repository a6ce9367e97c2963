"""Milliseconds per G+D training step of the pix2pix (64x64, batch 8, norm bn / in / in_affine)
and DCGAN (32x32, batch 32) networks of the shipped configs, NCHW vs channels_last, on this
machine's CPU. A measurement, not a test; the medians behind the configs' norm and
channels_last choices.

    python benchmarks/helpers/gan_networks.py [--steps 25] [--rounds 2]
    python benchmarks/helpers/gan_networks.py --bf16-split [--rounds 12]   # pix2pix: bf16 on G, on D, on both

`--bf16-split` times the shipped pix2pix pair (norm in) in float32 and with bfloat16 autocast on
the generator only, the discriminator only and both, round after round in one process, and
prints each variant's median ratio to float32 over the rounds: which network bf16 pays on.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from projects.dcgan.models import DCGANDiscriminator, DCGANGenerator  # noqa: E402
from projects.pix2pix.models import PatchGANDiscriminator, UNetGenerator  # noqa: E402


def networks(kind: str, norm: str | None):
    if kind == "pix2pix":
        return (UNetGenerator(base_channels=16, num_downs=6, norm=norm), PatchGANDiscriminator(6, 16, 3, norm=norm),
                torch.randn(8, 3, 64, 64), torch.randn(8, 3, 64, 64))
    return (DCGANGenerator(latent_dim=64, base_channels=32, image_size=32),
            DCGANDiscriminator(base_channels=32, image_size=32), torch.randn(32, 64, 1, 1), torch.randn(32, 3, 32, 32))


def step_ms(kind: str, norm: str | None, channels_last: bool, steps: int, bf16: bool = False,
            after_warmup=lambda: None, bf16_networks: tuple[str, ...] = ("G", "D")) -> float:
    """Median ms per G+D step after 5 warm-up steps; `bf16`: the forward passes of
    `bf16_networks` under bfloat16 autocast (losses in float32, as the framework's GAN step);
    `after_warmup` is called once the 5 warm-up steps are done."""
    torch.manual_seed(0)
    G, D, x, y = networks(kind, norm)
    if channels_last:
        G, D = G.to(memory_format=torch.channels_last), D.to(memory_format=torch.channels_last)
        y = y.contiguous(memory_format=torch.channels_last)
        if kind == "pix2pix":
            x = x.contiguous(memory_format=torch.channels_last)
    condition = (lambda image: torch.cat([x, image], 1)) if kind == "pix2pix" else (lambda image: image)
    opt_g = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
    autocast = lambda net: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16 and net in bf16_networks)  # noqa: E731
    times = []
    for step in range(steps):
        if step == 5:
            after_warmup()
        start = time.perf_counter()
        with autocast("G"):
            fake = G(x)
        with autocast("D"):
            real_logits, fake_logits = D(condition(y)).float(), D(condition(fake.detach())).float()
        loss_d = F.softplus(-real_logits).mean() + F.softplus(fake_logits).mean()
        opt_d.zero_grad(set_to_none=True), loss_d.backward(), opt_d.step()
        with autocast("D"):
            logits = D(condition(fake)).float()
        fake = fake.float()
        loss_g = F.softplus(-logits).mean() + (100 * (fake - y).abs().mean() if kind == "pix2pix" else 0)
        opt_g.zero_grad(set_to_none=True), loss_g.backward(), opt_g.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:]) * 1000


def bf16_split(steps: int, rounds: int) -> None:
    variants = {"float32": (), "bf16 G only": ("G",), "bf16 D only": ("D",), "bf16 G and D": ("G", "D")}
    times = {name: [] for name in variants}
    for _ in range(rounds + 1):  # the first round warms the machine and the allocator up
        for name, networks in variants.items():
            times[name].append(step_ms("pix2pix", "in", False, steps, bf16=bool(networks), bf16_networks=networks))
    for name in variants:
        ratios = [t / f for t, f in zip(times[name][1:], times["float32"][1:])]
        print(f"pix2pix {name:13s} {statistics.median(times[name][1:]):6.2f} ms per G+D step, "
              f"x{statistics.median(ratios):.3f} of float32 (rounds {min(ratios):.3f} to {max(ratios):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds; the last is printed")
    parser.add_argument("--bf16-split", action="store_true", help="pix2pix: bf16 autocast on G, on D, on both")
    args = parser.parse_args()
    if args.bf16_split:
        return bf16_split(args.steps, args.rounds)
    variants = [("pix2pix", n, cl) for n in ("bn", "in", "in_affine") for cl in (False, True)]
    variants += [("dcgan", None, cl) for cl in (False, True)]
    for _ in range(args.rounds):  # the first round warms the machine and the allocator up
        results = {v: step_ms(*v, args.steps) for v in variants}
    for (kind, norm, channels_last), ms in results.items():
        print(f"{kind:8s} norm {str(norm):9s} channels_last {str(channels_last):5s} {ms:6.1f} ms per G+D step")


if __name__ == "__main__":
    main()

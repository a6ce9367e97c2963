"""A researcher's own pix2pix script, the baseline of benchmarks/release/speed.py: decode a folder of
A|B JPEG pairs into memory once, then train pix2pix's U-Net generator and PatchGAN (benchmarks/plain/networks.py, written apart from
the framework's; the benchmark config's architecture) with the paper's losses: D on real
and detached fake pairs, then G (D's parameters frozen) with the adversarial and 100 x L1 terms.
The optimizers are fused, as the framework's default is (the ratio measures the framework).

    python benchmarks/plain/pix2pix.py ROOT --iters 1500 --batch 8 --window 50 --out ckpt.pth [--bf16] [--device cuda]

On a GPU (`--device cuda`) the decoded pairs are copied to the GPU once and each batch is indexed
and flipped there (the random draws stay on the CPU: the same flips as on the CPU), `cudnn.benchmark`
on: no copy per step.

Prints one JSON line: {"window_times": [seconds per iteration, averaged over each window]}.
"""

import argparse
import itertools
import json
import os
import time

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from networks import PatchDiscriminator, SkipBlockGenerator, gan_init


def load_pairs(folder):
    files = sorted(os.listdir(folder))
    pairs = np.stack([cv2.cvtColor(cv2.imread(os.path.join(folder, f)), cv2.COLOR_BGR2RGB) for f in files])
    pairs = torch.from_numpy(pairs).permute(0, 3, 1, 2).contiguous()  # N x 3 x H x 2W uint8
    half = pairs.shape[3] // 2
    return pairs[..., :half].contiguous(), pairs[..., half:].contiguous()


def random_flips(a, b):
    for dim in (3, 2):
        chosen = torch.rand(a.shape[0]) < 0.5
        a[chosen], b[chosen] = a[chosen].flip(dim), b[chosen].flip(dim)
    return a, b


def set_requires_grad(network, flag):
    for p in network.parameters():
        p.requires_grad_(flag)


def build(root, device, seed=0, channels_last=False, compile=False):
    """The decoded pairs, the two networks and their optimizers; the networks' weights NHWC and
    compiled when asked, as the framework's `channels_last` and `compile` do (benchmarks/gpu/gpu_speed.py)."""
    torch.manual_seed(seed)
    inputs, targets = (t.to(device) for t in load_pairs(os.path.join(root, "train")))  # on a GPU: once
    # the networks of projects/pix2pix/configs/pix2pix_shapes.yaml (instance norm), written apart
    G = gan_init(SkipBlockGenerator(in_ch=3, out_ch=3, width=16, downs=6)).to(device)
    D = gan_init(PatchDiscriminator(in_ch=6, width=16, layers=3)).to(device)
    for network in (G, D):
        if channels_last:
            network.to(memory_format=torch.channels_last)
        if compile:
            network.compile()
    opt_g = torch.optim.Adam(G.parameters(), lr=5e-4, betas=(0.5, 0.999), fused=True)
    opt_d = torch.optim.Adam(D.parameters(), lr=5e-4, betas=(0.5, 0.999), fused=True)
    return inputs, targets, G, D, opt_g, opt_d


def training_steps(inputs, targets, G, D, opt_g, opt_d, batch, device, bf16=False):
    """Train for ever, epoch after epoch; yields (loss_d, loss_g) after each iteration."""
    bce = F.binary_cross_entropy_with_logits
    while True:
        order = torch.randperm(len(inputs))
        for first in range(0, len(order) - batch + 1, batch):
            index = order[first:first + batch]
            a, b = random_flips(inputs[index], targets[index])
            a, b = a.float() / 127.5 - 1, b.float() / 127.5 - 1
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                fake = G(a)
                real_logits, fake_logits = D(torch.cat([a, b], 1)), D(torch.cat([a, fake.detach()], 1))
            real_logits, fake_logits = real_logits.float(), fake_logits.float()
            loss_d = 0.5 * (bce(real_logits, torch.ones_like(real_logits)) + bce(fake_logits, torch.zeros_like(fake_logits)))
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
            set_requires_grad(D, False)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = D(torch.cat([a, fake], 1)).float()
            loss_g = bce(logits, torch.ones_like(logits)) + 100 * F.l1_loss(fake.float(), b)
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            set_requires_grad(D, True)
            yield loss_d, loss_g


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--iters", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--out", default=None)
    parser.add_argument("--bf16", action="store_true", help="forward passes under bfloat16 autocast, losses in float32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True  # no effect on the CPU
    inputs, targets, G, D, opt_g, opt_d = build(args.root, device)
    steps = training_steps(inputs, targets, G, D, opt_g, opt_d, args.batch, device, args.bf16)
    windows, start = [], time.perf_counter()
    for it, (loss_d, loss_g) in enumerate(itertools.islice(steps, args.iters), 1):
        if it % args.window == 0:
            loss_d.item(), loss_g.item()  # the log line's host syncs
            windows.append((time.perf_counter() - start) / args.window)
            start = time.perf_counter()
    if args.out:
        torch.save({"G": G.state_dict(), "D": D.state_dict()}, args.out)
    print(json.dumps({"window_times": windows}))


if __name__ == "__main__":
    main()

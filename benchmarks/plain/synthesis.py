"""A researcher's own semantic-synthesis script, the baseline of benchmarks/release/in_process.py's
`--case oasis` and `--case spade`: decode a VOC-layout folder of texture scenes
(benchmarks/helpers/folder_data.py, `make_voc(..., scenes="textures")`) into memory once, then train
OASIS's SPADE generator with 3D noise (benchmarks/plain/networks.py, written apart from the
framework's) against
- `--variant oasis` (configs/synthesis/oasis_textures.yaml): a UNet segmenter D without norm,
  7 + 1 outputs per pixel (the fake class last), OASIS's class-balanced per-pixel CE, and LabelMix
  (each class region of each image from the real or the fake by a coin drawn on the device:
  OASIS's own code loops over `torch.unique` classes, a host sync per step);
- `--variant spade` (configs/synthesis/spade_textures.yaml): a two-scale PatchGAN on
  [one-hot, image] with instance norm, the hinge loss and pix2pixHD's feature matching;
with MSGAN's mode-seeking term where the config has one (the oasis config): every label map drawn
twice, noise z1 and z2, in one pass of the doubled batch, G's loss + weight x the batch mean of
1 / (mean |fake1 - fake2| / mean |z1 - z2| + 1e-5), image by image;
D on reals and detached fakes first, then G (D's parameters frozen), then the EMA of G's weights
(decay 0.99, buffers copied). Adam with the configs' two learning rates and betas, fused as the
framework's default is (the ratio measures the framework); no flips (the configs have none).

    python benchmarks/plain/synthesis.py ROOT --variant oasis --iters 1000 --batch 8 --window 50 --out ckpt.pth [--bf16] [--device cuda]

Prints one JSON line: {"window_times": [seconds per iteration, averaged over each window]}.
"""

import argparse
import copy
import itertools
import json
import time

import torch
import torch.nn.functional as F

from networks import MultiScalePatchDiscriminator, SegUNet, SPADEGenerator, gan_init
from segmentation import load_voc

CLASSES = 7
NOISE_DIM = {"oasis": 16, "spade": 16}
MODE_SEEKING_WEIGHT = {"oasis": 0.03, "spade": 0.0}
EMA_DECAY = 0.99
LABELMIX_WEIGHT = 10.0
FEATURE_MATCHING_WEIGHT = 10.0
# the configs' optimizers: TTUR rates, OASIS's and SPADE's betas
OPTIMIZERS = {"oasis": {"lr_g": 1e-4, "lr_d": 4e-4, "betas": (0.0, 0.999)},
              "spade": {"lr_g": 1e-4, "lr_d": 4e-4, "betas": (0.0, 0.9)}}


def networks(variant):
    """(G, D) of the variant's config, written apart."""
    G = SPADEGenerator(classes=CLASSES, noise_dim=NOISE_DIM[variant], width=32, ups=3, hidden=32)
    if variant == "oasis":
        D = SegUNet(in_ch=3, classes=CLASSES + 1, width=16, levels=3, batch_norm=False)
    else:  # D sees the one-hot map and the image
        D = gan_init(MultiScalePatchDiscriminator(in_ch=CLASSES + 3, width=32, layers=3, scales=2))
    return G, D


def build(root, device, variant="oasis", seed=0):
    """The decoded folder, the networks, G's average and the optimizers."""
    torch.manual_seed(seed)
    images, masks = (t.to(device) for t in load_voc(root))  # on a GPU: the whole folder, once
    G, D = (network.to(device) for network in networks(variant))
    G_ema = copy.deepcopy(G).requires_grad_(False)
    settings = OPTIMIZERS[variant]
    opt_g = torch.optim.Adam(G.parameters(), lr=settings["lr_g"], betas=settings["betas"], fused=True)
    opt_d = torch.optim.Adam(D.parameters(), lr=settings["lr_d"], betas=settings["betas"], fused=True)
    return images, masks, G, D, G_ema, opt_g, opt_d, variant


def one_hot(masks):
    """SPADE's preprocess_input: ones scattered into a zero map."""
    zeros = torch.zeros(masks.shape[0], CLASSES, *masks.shape[1:], device=masks.device)
    return zeros.scatter_(1, masks[:, None], 1.0)


def class_balanced_ce(logits, masks, seg):
    """OASIS's loss towards the true classes: every class present in the batch weighs the same."""
    occurrence = seg.sum(dim=(0, 2, 3))
    present = (occurrence > 0).sum()
    weights = (seg[:, 0].numel() / (present * occurrence))[masks]  # absent classes (inf) are never indexed
    return (F.cross_entropy(logits.float(), masks, reduction="none") * weights).mean()


def scale_mean(outputs, term):
    """The mean over the discriminator's scales of term(logits)."""
    return sum(term(logits.float()) for logits in outputs) / len(outputs)


def feature_matching(fake_features, real_features):
    """pix2pixHD's: 4 / layers / scales x the L1 distance of each block's output."""
    loss = 0
    for fake_layers, real_layers in zip(fake_features, real_features):
        for fake, real in zip(fake_layers, real_layers):
            loss = loss + 4 / len(fake_layers) / len(fake_features) * F.l1_loss(fake.float(), real.float())
    return FEATURE_MATCHING_WEIGHT * loss


def mode_seeking(fake, second, noise, second_noise):
    ratio = (fake.float() - second.float()).abs().mean((1, 2, 3)) / (noise - second_noise).abs().mean(1)
    return (4 / (ratio + ratio.detach().mean() + 1e-5)).mean()  # per map, bounded by the batch's mean ratio


def set_requires_grad(network, flag):
    for p in network.parameters():
        p.requires_grad_(flag)


@torch.no_grad()
def update_ema(ema, network):
    for average, param in zip(ema.parameters(), network.parameters()):
        average.lerp_(param, 1 - EMA_DECAY)
    for average, buffer in zip(ema.buffers(), network.buffers()):
        average.copy_(buffer)


def oasis_d_loss(D, real, fake, masks, seg, autocast):
    """True classes on reals, the fake class on fakes, and LabelMix's consistency."""
    with autocast():
        real_logits, fake_logits = D(real), D(fake)
    coins = torch.randint(0, 2, (masks.shape[0], CLASSES), device=masks.device).float()
    mix = coins.gather(1, masks.flatten(1)).view_as(masks)[:, None]  # each image's class regions: 1 real, 0 fake
    with autocast():
        mixed_logits = D(mix * real + (1 - mix) * fake)
    target = mix * real_logits.float() + (1 - mix) * fake_logits.float()
    return (class_balanced_ce(real_logits, masks, seg)
            + F.cross_entropy(fake_logits.float(), torch.full_like(masks, CLASSES))
            + LABELMIX_WEIGHT * F.mse_loss(mixed_logits.float(), target))


def oasis_g_loss(D, real, fake, masks, seg, autocast):
    with autocast():
        logits = D(fake)
    return class_balanced_ce(logits, masks, seg)


def spade_d_loss(D, real, fake, masks, seg, autocast):
    with autocast():
        real_logits, _ = D(torch.cat([seg, real], 1))
        fake_logits, _ = D(torch.cat([seg, fake], 1))
    return (scale_mean(real_logits, lambda logits: F.relu(1 - logits).mean())
            + scale_mean(fake_logits, lambda logits: F.relu(1 + logits).mean()))


def spade_g_loss(D, real, fake, masks, seg, autocast):
    """Hinge's generator term and feature matching against D's features on the reals."""
    with autocast():
        fake_logits, fake_features = D(torch.cat([seg, fake], 1))
        with torch.no_grad():
            _, real_features = D(torch.cat([seg, real], 1))
    return scale_mean(fake_logits, lambda logits: -logits.mean()) + feature_matching(fake_features, real_features)


LOSSES = {"oasis": (oasis_d_loss, oasis_g_loss), "spade": (spade_d_loss, spade_g_loss)}


def training_steps(images, masks, G, D, G_ema, opt_g, opt_d, variant, batch, device, bf16=False):
    """Train for ever, epoch after epoch; yields (loss_d, loss_g) after each iteration."""
    d_loss, g_loss = LOSSES[variant]
    mode_seeking_weight = MODE_SEEKING_WEIGHT[variant]

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    while True:
        order = torch.randperm(len(images))
        for first in range(0, len(order) - batch + 1, batch):
            index = order[first:first + batch]
            real, label = images[index].float() / 127.5 - 1, masks[index]
            seg = one_hot(label)
            noise = torch.randn(batch, 2 if mode_seeking_weight else 1, G.noise_dim, device=device)
            with autocast():
                if mode_seeking_weight:  # (the first draws, the second draws)
                    fake, second = G(torch.cat([seg, seg]), torch.cat([noise[:, 0], noise[:, 1]])).chunk(2)
                else:
                    fake = G(seg, noise[:, 0])
            loss_d = d_loss(D, real, fake.detach(), label, seg, autocast)
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
            set_requires_grad(D, False)
            loss_g = g_loss(D, real, fake, label, seg, autocast)
            if mode_seeking_weight:
                loss_g = loss_g + mode_seeking_weight * mode_seeking(fake, second, noise[:, 0], noise[:, 1])
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            set_requires_grad(D, True)
            update_ema(G_ema, G)
            yield loss_d, loss_g


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--variant", choices=sorted(LOSSES), default="oasis")
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--out", default=None)
    parser.add_argument("--bf16", action="store_true", help="forward passes under bfloat16 autocast, losses in float32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True  # no effect on the CPU
    state = build(args.root, device, args.variant)
    steps = training_steps(*state, args.batch, device, args.bf16)
    windows, start = [], time.perf_counter()
    for it, (loss_d, loss_g) in enumerate(itertools.islice(steps, args.iters), 1):
        if it % args.window == 0:
            loss_d.item(), loss_g.item()  # the log line's host syncs
            windows.append((time.perf_counter() - start) / args.window)
            start = time.perf_counter()
    if args.out:
        _, _, G, D, G_ema, *_ = state
        torch.save({"G": G.state_dict(), "D": D.state_dict(), "G_ema": G_ema.state_dict()}, args.out)
    print(json.dumps({"window_times": windows}))


if __name__ == "__main__":
    main()

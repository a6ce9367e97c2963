"""A researcher's own segmentation script, the baseline of benchmarks/release/speed.py: decode a VOC-layout
folder into memory once, then loop over contiguous NCHW tensors with random flips, AdamW and
cross-entropy on its own U-Net (benchmarks/plain/networks.py: the framework's Quickstart UNet, written apart). The optimizer
is fused, as the framework's default is, so the ratio measures the framework, not the kernel.

    python benchmarks/plain/segmentation.py ROOT --iters 1000 --batch 16 --window 50 --out ckpt.pth [--bf16] [--device cuda]

On a GPU (`--device cuda`) the decoded folder is copied to the GPU once and each batch is indexed
and flipped there (the random draws stay on the CPU: the same flips as on the CPU), `cudnn.benchmark`
on: no copy per step, the fastest such a script can feed a GPU from memory.

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
from PIL import Image

from networks import SegUNet


def load_voc(root):
    names = open(os.path.join(root, "ImageSets/Segmentation/train.txt")).read().split()
    images = [cv2.cvtColor(cv2.imread(f"{root}/JPEGImages/{n}.jpg"), cv2.COLOR_BGR2RGB) for n in names]
    masks = [np.asarray(Image.open(f"{root}/SegmentationClass/{n}.png")) for n in names]
    return (torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous(),  # N x 3 x H x W uint8
            torch.from_numpy(np.stack(masks)).long())


def random_flips(images, masks):
    for dim in (3, 2):  # horizontal, vertical: each sample flipped with p = 0.5
        chosen = torch.rand(images.shape[0]) < 0.5
        images[chosen] = images[chosen].flip(dim)
        masks[chosen] = masks[chosen].flip(dim - 1)
    return images, masks


def build(root, device, seed=0, channels_last=False, compile=False):
    """The decoded folder, the network and its optimizer; the network's weights NHWC and compiled
    when asked, as the framework's `channels_last` and `compile` do (benchmarks/gpu/gpu_speed.py)."""
    torch.manual_seed(seed)
    images, masks = (t.to(device) for t in load_voc(root))  # on a GPU: the whole folder, once
    model = SegUNet(in_ch=3, classes=4, width=16, levels=3).to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    if compile:
        model.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4, fused=True)
    return images, masks, model, optimizer


def training_steps(images, masks, model, optimizer, batch, device, bf16=False):
    """Train for ever, epoch after epoch; yields the loss after each iteration."""
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    while True:
        order = torch.randperm(len(images))
        for first in range(0, len(order) - batch + 1, batch):
            index = order[first:first + batch]
            image, mask = random_flips(images[index], masks[index])
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = model((image.float() - mean) / std)
            loss = F.cross_entropy(logits.float(), mask, ignore_index=255)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            yield loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--out", default=None)
    parser.add_argument("--bf16", action="store_true", help="the forward pass under bfloat16 autocast, the loss in float32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True  # no effect on the CPU
    images, masks, model, optimizer = build(args.root, device)
    steps = training_steps(images, masks, model, optimizer, args.batch, device, args.bf16)
    windows, start = [], time.perf_counter()
    for it, loss in enumerate(itertools.islice(steps, args.iters), 1):
        if it % args.window == 0:
            loss.item()  # the log line's host sync
            windows.append((time.perf_counter() - start) / args.window)
            start = time.perf_counter()
    if args.out:
        torch.save(model.state_dict(), args.out)
    print(json.dumps({"window_times": windows}))


if __name__ == "__main__":
    main()

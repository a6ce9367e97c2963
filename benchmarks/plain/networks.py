"""The baselines' own networks, written for the plain scripts without importing the framework:
a baseline that imports the framework's classes cannot see a slowdown inside them.

Each is the architecture of the framework network its benchmark trains (same parameters, output
shapes and FLOPs, checked by tests/test_plain_baselines.py), written the way a researcher's
script would write it:
- `SegUNet`: the Quickstart U-Net (3x3 conv-BN-ReLU pairs, max-pool down, bilinear x2 + 1x1 conv
  up, concatenated skips, a 1x1 head);
- `SkipBlockGenerator`: pix2pix's U-Net generator as the original code builds it, one recursive
  skip block per level (the framework's builds the levels in loops);
- `PatchDiscriminator`: pix2pix's PatchGAN.
"""

import torch
from torch import nn


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SegUNet(nn.Module):
    def __init__(self, in_ch=3, classes=4, width=16, levels=3):
        super().__init__()
        chans = [width << i for i in range(levels + 1)]
        self.inc = double_conv(in_ch, chans[0])
        self.encoders = nn.ModuleList(nn.Sequential(nn.MaxPool2d(2), double_conv(a, b))
                                      for a, b in zip(chans[:-1], chans[1:]))
        self.reducers = nn.ModuleList(nn.Conv2d(b, a, 1) for a, b in zip(chans[:-1], chans[1:]))
        self.decoders = nn.ModuleList(double_conv(2 * a, a) for a in chans[:-1])
        self.out = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        features = [self.inc(x)]
        for encoder in self.encoders:
            features.append(encoder(features[-1]))
        x = features.pop()
        for level in reversed(range(len(self.decoders))):
            x = nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = self.decoders[level](torch.cat([self.reducers[level](x), features.pop()], 1))
        return self.out(x)


class SkipBlock(nn.Module):
    """One level: down conv, the inner levels, up conv; returns [x, up(inner(down(x)))] except at
    the outermost level, which returns the image."""

    def __init__(self, outer, inner, submodule=None, in_ch=None, outermost=False, innermost=False):
        super().__init__()
        in_ch = in_ch or outer
        self.outermost = outermost
        down = nn.Conv2d(in_ch, inner, 4, 2, 1, bias=True)  # instance norm: convs keep their bias
        if outermost:
            layers = [down, submodule, nn.ReLU(True), nn.ConvTranspose2d(2 * inner, outer, 4, 2, 1), nn.Tanh()]
        elif innermost:
            layers = [nn.LeakyReLU(0.2, True), down, nn.ReLU(True), nn.ConvTranspose2d(inner, outer, 4, 2, 1),
                      nn.InstanceNorm2d(outer)]
        else:
            layers = [nn.LeakyReLU(0.2, True), down, nn.InstanceNorm2d(inner), submodule, nn.ReLU(True),
                      nn.ConvTranspose2d(2 * inner, outer, 4, 2, 1), nn.InstanceNorm2d(outer)]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x) if self.outermost else torch.cat([x, self.model(x)], 1)


class SkipBlockGenerator(nn.Module):
    def __init__(self, in_ch=3, out_ch=3, width=16, downs=6):
        super().__init__()
        widths = [width * min(2**i, 8) for i in range(downs)]
        block = SkipBlock(widths[-2], widths[-1], innermost=True)
        for level in range(downs - 2, 0, -1):
            block = SkipBlock(widths[level - 1], widths[level], block)
        self.model = SkipBlock(out_ch, widths[0], block, in_ch=in_ch, outermost=True)

    def forward(self, x):
        return self.model(x)


class PatchDiscriminator(nn.Module):
    def __init__(self, in_ch=6, width=16, layers=3):
        super().__init__()
        body = [nn.Conv2d(in_ch, width, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        mult = 1
        for n in range(1, layers + 1):
            prev, mult = mult, min(2**n, 8)
            body += [nn.Conv2d(width * prev, width * mult, 4, 2 if n < layers else 1, 1),
                     nn.InstanceNorm2d(width * mult), nn.LeakyReLU(0.2, True)]
        body.append(nn.Conv2d(width * mult, 1, 4, 1, 1))
        self.model = nn.Sequential(*body)

    def forward(self, x):
        return self.model(x)


def gan_init(net):
    """N(0, 0.02) conv weights, zero biases (DCGAN/pix2pix)."""
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return net

"""The baselines' own networks, written for the plain scripts without importing the framework:
a baseline that imports the framework's classes cannot see a slowdown inside them.

Each is the architecture of the framework network its benchmark trains (same parameters, output
shapes and FLOPs, checked by tests/test_plain_baselines.py), written the way a researcher's
script would write it:
- `SegUNet`: the Quickstart U-Net (3x3 conv-BN-ReLU pairs, max-pool down, bilinear x2 + 1x1 conv
  up, concatenated skips, a 1x1 head); without BN (`batch_norm=False`, biased convs) it is OASIS's
  segmenter discriminator of configs/synthesis/oasis_textures.yaml;
- `SkipBlockGenerator`: pix2pix's U-Net generator as the original code builds it, one recursive
  skip block per level (the framework's builds the levels in loops);
- `PatchDiscriminator`: pix2pix's PatchGAN;
- `SPADEGenerator` and `MultiScalePatchDiscriminator`: the semantic-synthesis networks
  (benchmarks/plain/synthesis.py), written the way OASIS's and pix2pixHD's code writes them.
"""

import torch
import torch.nn.functional as F
from torch import nn


def double_conv(cin, cout, batch_norm=True):
    layers = []
    for a, b in ((cin, cout), (cout, cout)):
        layers.append(nn.Conv2d(a, b, 3, padding=1, bias=not batch_norm))  # BN's shift replaces the bias
        layers += [nn.BatchNorm2d(b), nn.ReLU(inplace=True)] if batch_norm else [nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class SegUNet(nn.Module):
    def __init__(self, in_ch=3, classes=4, width=16, levels=3, batch_norm=True):
        super().__init__()
        chans = [width << i for i in range(levels + 1)]
        self.inc = double_conv(in_ch, chans[0], batch_norm)
        self.encoders = nn.ModuleList(nn.Sequential(nn.MaxPool2d(2), double_conv(a, b, batch_norm))
                                      for a, b in zip(chans[:-1], chans[1:]))
        self.reducers = nn.ModuleList(nn.Conv2d(b, a, 1) for a, b in zip(chans[:-1], chans[1:]))
        self.decoders = nn.ModuleList(double_conv(2 * a, a, batch_norm) for a in chans[:-1])
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


class SPADE(nn.Module):
    """BatchNorm without affine, then a per-pixel scale and shift from the (resized) label map."""

    def __init__(self, channels, label_ch, hidden):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels, affine=False)
        self.mlp_shared = nn.Sequential(nn.Conv2d(label_ch, hidden, 3, padding=1), nn.ReLU())
        self.mlp_gamma = nn.Conv2d(hidden, channels, 3, padding=1)
        self.mlp_beta = nn.Conv2d(hidden, channels, 3, padding=1)

    def forward(self, x, seg):
        actv = self.mlp_shared(F.interpolate(seg, size=x.shape[2:], mode="nearest"))
        return self.norm(x) * (1 + self.mlp_gamma(actv)) + self.mlp_beta(actv)


class SPADEResBlock(nn.Module):
    def __init__(self, fin, fout, label_ch, hidden):
        super().__init__()
        fmiddle = min(fin, fout)
        sn = nn.utils.parametrizations.spectral_norm  # on the block's convs, never on SPADE's (as SPADE)
        self.learned_shortcut = fin != fout
        self.conv_0 = sn(nn.Conv2d(fin, fmiddle, 3, padding=1))
        self.conv_1 = sn(nn.Conv2d(fmiddle, fout, 3, padding=1))
        self.norm_0, self.norm_1 = SPADE(fin, label_ch, hidden), SPADE(fmiddle, label_ch, hidden)
        if self.learned_shortcut:
            self.conv_s = sn(nn.Conv2d(fin, fout, 1, bias=False))
            self.norm_s = SPADE(fin, label_ch, hidden)

    def forward(self, x, seg):
        x_s = self.conv_s(self.norm_s(x, seg)) if self.learned_shortcut else x
        dx = self.conv_0(F.leaky_relu(self.norm_0(x, seg), 0.2))
        dx = self.conv_1(F.leaky_relu(self.norm_1(dx, seg), 0.2))
        return x_s + dx


class SPADEGenerator(nn.Module):
    """OASIS's generator: one-hot label map + a noise vector spread over the pixels (3D noise),
    `ups` x2 upsamplings between `ups + 1` SPADE blocks, widest (16 x width) first."""

    def __init__(self, classes=7, noise_dim=16, width=16, ups=3, hidden=32):
        super().__init__()
        self.ups, self.noise_dim = ups, noise_dim
        channels = [width * min(16, 2 ** (ups - i)) for i in range(ups + 1)]
        self.fc = nn.Conv2d(classes + noise_dim, channels[0], 3, padding=1)
        self.body = nn.ModuleList(SPADEResBlock(channels[max(i - 1, 0)], channels[i], classes + noise_dim, hidden)
                                  for i in range(ups + 1))
        self.conv_img = nn.Conv2d(channels[-1], 3, 3, padding=1)

    def forward(self, seg, z):
        seg = torch.cat([seg, z[:, :, None, None].expand(-1, -1, *seg.shape[2:])], 1)
        x = self.fc(F.interpolate(seg, scale_factor=1 / 2**self.ups, mode="nearest"))
        for i, block in enumerate(self.body):
            x = block(x, seg)
            if i < self.ups:
                x = F.interpolate(x, scale_factor=2, mode="nearest")
        return torch.tanh(self.conv_img(F.leaky_relu(x, 0.2)))


class FeaturePatchDiscriminator(PatchDiscriminator):
    """The PatchGAN, also returning each conv-norm-activation block's output (pix2pixHD's
    getIntermFeat) for feature matching."""

    def forward(self, x):
        features = []
        for layer in self.model[:-1]:
            x = layer(x)
            if isinstance(layer, nn.LeakyReLU):  # the end of a block
                features.append(x)
        return self.model[-1](x), features


class MultiScalePatchDiscriminator(nn.Module):
    """pix2pixHD's: `scales` PatchGANs, each on the input average-pooled once more than the
    last; returns ([logits per scale], [[block outputs] per scale])."""

    def __init__(self, in_ch=10, width=32, layers=3, scales=2):
        super().__init__()
        self.scales = nn.ModuleList(FeaturePatchDiscriminator(in_ch, width, layers) for _ in range(scales))
        self.downsample = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

    def forward(self, x):
        logits, features = [], []
        for i, net in enumerate(self.scales):
            if i:
                x = self.downsample(x)
            scale_logits, scale_features = net(x)
            logits.append(scale_logits)
            features.append(scale_features)
        return logits, features


def gan_init(net):
    """N(0, 0.02) conv weights, zero biases (DCGAN/pix2pix)."""
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return net

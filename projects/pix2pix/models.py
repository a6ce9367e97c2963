"""pix2pix networks (Isola et al., 2017): U-Net and ResNet generators, a PatchGAN discriminator.

Generators map a 3-channel image in [-1, 1] to one in [-1, 1] (tanh). The discriminator of a
conditional GAN sees input and image concatenated (6 channels) and returns a map of logits,
one per overlapping patch (70x70 pixels with the default 3 layers).
"""

from __future__ import annotations

import torch
from torch import nn

from framework.errors import DataError
from framework.models import build_norm, init_gan_weights_
from framework.registry import MODELS


def check_divisible(image: torch.Tensor, levels: int, network: str, key: str) -> None:
    """A clear error for an image size the stride-2 levels cannot halve down and back up
    (naming the network's own keyword; the config path is the caller's business)."""
    step = 2**levels
    height, width = image.shape[-2:]
    if height % step or width % step:
        raise DataError(f"{network}: a {height}x{width} input is not a multiple of 2^{key}={step} pixels per side; "
                        f"lower {key} or resize the images")


def _level_channels(base_channels: int, levels: int) -> list[int]:
    """Widths doubling per level, capped at 8x the base (pix2pix's 64, 128, 256, 512, 512, ...)."""
    return [base_channels * min(2**level, 8) for level in range(levels)]


@MODELS.register()
class UNetGenerator(nn.Module):
    """The pix2pix U-Net: `num_downs` stride-2 4x4 convs down to 1/2^num_downs, mirrored by
    transposed convs with skip connections. Input sides must be multiples of 2^num_downs
    (num_downs 8 for 256x256, 6 for 64x64). `dropout` applies to the (up to) three decoder
    levels just below the bottleneck, as in the paper (which keeps it on at test time; here it
    follows train/eval mode).

    `edge_bias`: the outermost and innermost down convs, which no norm follows, have a bias.
    false gives the official pix2pix layout (`unet_256`: num_downs 8, norm bn, dropout 0.5), whose
    down convs all go without one under batch norm: 576 parameters fewer at base_channels 64."""

    def __init__(self, in_channels: int = 3, out_channels: int = 3, base_channels: int = 64, num_downs: int = 8,
                 norm: str = "bn", dropout: float = 0.0, edge_bias: bool = True):
        super().__init__()
        if num_downs < 2:
            raise ValueError(f"num_downs must be >= 2, got {num_downs}")
        widths = _level_channels(base_channels, num_downs)
        biased = norm != "bn"  # a batch norm's shift replaces the conv bias
        self.downs = nn.ModuleList()
        for level, width in enumerate(widths):
            layers: list[nn.Module] = [] if level == 0 else [nn.LeakyReLU(0.2, inplace=True)]
            edge = level in (0, num_downs - 1)  # no norm on the outermost and innermost
            layers.append(nn.Conv2d(in_channels if level == 0 else widths[level - 1], width, 4, 2, 1,
                                    bias=biased or (edge and edge_bias)))
            if not edge:
                layers.append(build_norm(norm, width))
            self.downs.append(nn.Sequential(*layers))
        self.ups = nn.ModuleList()
        for level in reversed(range(num_downs)):
            innermost, outermost = level == num_downs - 1, level == 0
            source = widths[level] if innermost else 2 * widths[level]
            layers = [nn.ReLU(inplace=True)]
            if outermost:
                layers += [nn.ConvTranspose2d(source, out_channels, 4, 2, 1), nn.Tanh()]
            else:
                layers += [nn.ConvTranspose2d(source, widths[level - 1], 4, 2, 1, bias=biased),
                           build_norm(norm, widths[level - 1])]
                if dropout and num_downs - 4 <= level < num_downs - 1:
                    layers.append(nn.Dropout(dropout))
            self.ups.append(nn.Sequential(*layers))
        self.num_downs = num_downs
        init_gan_weights_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_divisible(x, self.num_downs, "UNetGenerator", "num_downs")
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
        skips.pop()  # the bottleneck feeds the decoder directly
        for up in self.ups:
            x = up(x)
            if skips:
                x = torch.cat([x, skips.pop()], dim=1)
        return x


class ResidualBlock(nn.Module):
    def __init__(self, channels: int, norm: str, dropout: float):
        super().__init__()
        layers = [nn.ReflectionPad2d(1), nn.Conv2d(channels, channels, 3, bias=norm != "bn"),
                  build_norm(norm, channels), nn.ReLU(inplace=True)]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers += [nn.ReflectionPad2d(1), nn.Conv2d(channels, channels, 3, bias=norm != "bn"),
                   build_norm(norm, channels)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


@MODELS.register()
class ResnetGenerator(nn.Module):
    """Johnson et al.'s ResNet generator as in pix2pix/CycleGAN: a 7x7 conv, `num_downsampling`
    stride-2 convs, `num_blocks` residual blocks, as many transposed convs, a 7x7 conv, tanh.
    Input sides must be multiples of 2^num_downsampling."""

    def __init__(self, in_channels: int = 3, out_channels: int = 3, base_channels: int = 64, num_blocks: int = 9,
                 num_downsampling: int = 2, norm: str = "in", dropout: float = 0.0):
        super().__init__()
        biased = norm != "bn"
        layers: list[nn.Module] = [nn.ReflectionPad2d(3), nn.Conv2d(in_channels, base_channels, 7, bias=biased),
                                   build_norm(norm, base_channels), nn.ReLU(inplace=True)]
        width = base_channels
        for _ in range(num_downsampling):
            layers += [nn.Conv2d(width, 2 * width, 3, 2, 1, bias=biased), build_norm(norm, 2 * width),
                       nn.ReLU(inplace=True)]
            width *= 2
        layers += [ResidualBlock(width, norm, dropout) for _ in range(num_blocks)]
        for _ in range(num_downsampling):
            layers += [nn.ConvTranspose2d(width, width // 2, 3, 2, 1, output_padding=1, bias=biased),
                       build_norm(norm, width // 2), nn.ReLU(inplace=True)]
            width //= 2
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(width, out_channels, 7), nn.Tanh()]
        self.body = nn.Sequential(*layers)
        self.num_downsampling = num_downsampling
        init_gan_weights_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_divisible(x, self.num_downsampling, "ResnetGenerator", "num_downsampling")
        return self.body(x)


@MODELS.register()
class PatchGANDiscriminator(nn.Module):
    """The pix2pix PatchGAN: `num_layers` stride-2 4x4 convs, then two stride-1 4x4 convs, the
    last giving one logit per patch. num_layers 3 sees 70x70 patches (1: 16x16, 5: 286x286).
    `in_channels` is 6 for a conditional GAN (input and image), 3 for an unconditional one."""

    def __init__(self, in_channels: int = 6, base_channels: int = 64, num_layers: int = 3, norm: str = "bn"):
        super().__init__()
        biased = norm != "bn"
        layers: list[nn.Module] = [nn.Conv2d(in_channels, base_channels, 4, 2, 1), nn.LeakyReLU(0.2, inplace=True)]
        widths = _level_channels(base_channels, num_layers + 1)
        for level in range(1, num_layers + 1):
            stride = 2 if level < num_layers else 1
            layers += [nn.Conv2d(widths[level - 1], widths[level], 4, stride, 1, bias=biased),
                       build_norm(norm, widths[level]), nn.LeakyReLU(0.2, inplace=True)]
        layers.append(nn.Conv2d(widths[num_layers], 1, 4, 1, 1))
        self.body = nn.Sequential(*layers)
        init_gan_weights_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@MODELS.register()
class LabelMapGenerator(nn.Module):
    """An image-to-image generator fed one-hot label maps, for SemanticSynthesisTask: pix2pixHD's
    global generator is `{type: LabelMapGenerator, num_classes: 35, contain_dontcare_label: true,
    network: {type: ResnetGenerator, in_channels: 36, num_downsampling: 4, ...}}`. The wrapper adds
    no parameters; it states what the synthesis task asks of a generator (its classes, the
    don't-care and instance-edge channels, no noise, the size divisor) and checks that `network`'s
    first convolution takes that many channels, so a wrong `in_channels` fails when built."""

    noise_dim = 0  # one label map gives one image (pix2pixHD without its feature encoder)

    def __init__(self, network: nn.Module, num_classes: int, contain_dontcare_label: bool = False,
                 instance_edges: bool = False):
        super().__init__()
        from framework.inference.settings import network_size_divisor

        self.network = network
        self.num_classes = num_classes
        self.contain_dontcare_label = bool(contain_dontcare_label)
        self.instance_edges = bool(instance_edges)
        channels = num_classes + int(self.contain_dontcare_label) + int(self.instance_edges)
        first = next((m for m in network.modules() if isinstance(m, nn.Conv2d)), None)
        if first is None or first.in_channels != channels:
            raise ValueError(f"network: its first convolution takes {getattr(first, 'in_channels', 'no')} channels; "
                             f"the label maps give {channels} (num_classes {num_classes}, contain_dontcare_label "
                             f"{self.contain_dontcare_label}, instance_edges {self.instance_edges}): set the "
                             f"network's in_channels to {channels}")
        self.size_divisor = network_size_divisor(network)

    def forward(self, labels: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self.network(labels)

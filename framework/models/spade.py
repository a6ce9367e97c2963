"""SPADE (Park et al., 2019) and the OASIS generator (Schönfeld et al., 2021): images from label maps.

- `SPADE`: a parameter-free normalisation (BatchNorm2d without affine, or InstanceNorm2d), then
  a per-pixel scale and shift predicted from the label map resized (nearest) to the features:
  out = norm(x) * (1 + gamma) + beta, gamma and beta from a shared conv + ReLU and one conv each.
- `SPADEResBlock`: two SPADE -> LeakyReLU(0.2) -> 3x3 conv steps; a learned 1x1 shortcut with
  its own SPADE when the channel count changes; spectral norm optional on those convs (as
  SPADE's code: never on the SPADE convs themselves).
- `SPADEGenerator`: OASIS's generator, or SPADE's with `layout: spade`. Its input is the one-hot
  label map (`one_hot_labels`) and a noise vector per image, broadcast over the pixels and
  concatenated to the label map (OASIS's 3D noise; `noise_dim: 0` for SPADE): that stack
  conditions every SPADE and, resized to the start size, feeds the first conv (no VAE encoder
  as in SPADE). `num_up_layers` x2 upsamplings follow, so image sides must be divisible by
  2**num_up_layers. Output: tanh, in [-1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.spectral_norm import apply_spectral_norm
from framework.registry import MODELS

PARAM_FREE_NORMS = ("batch", "instance")
# The widest layer is 16 x base_channels, as in SPADE's and OASIS's generators (16ch at the start).
MAX_WIDTH_MULTIPLIER = 16
LAYOUTS = ("oasis", "spade")
# SPADE's num_upsampling_layers -> how many x2 upsamplings its generator makes
SPADE_UPSAMPLINGS = {"normal": 5, "more": 6, "most": 7}


def one_hot_labels(labels: torch.Tensor, num_classes: int, ignore_index: int = 255,
                   contain_dontcare_label: bool = False) -> torch.Tensor:
    """N x H x W class ids (long) -> N x C x H x W float one-hot, as SPADE's preprocess_input.

    C = num_classes, plus one don't-care channel (index num_classes) with `contain_dontcare_label`,
    which the `ignore_index` pixels light; without it those pixels are all zeros. Other values
    outside [0, num_classes) are the data's mistake: the datasets refuse them naming the file
    (no host sync here to look for them).
    """
    if labels.dim() != 3:
        raise ValueError(f"labels must be N x H x W class ids, got shape {tuple(labels.shape)}")
    labels = labels.long()
    index = torch.where(labels == ignore_index, torch.full_like(labels, num_classes), labels)
    one_hot = labels.new_zeros((labels.shape[0], num_classes + 1, *labels.shape[1:]), dtype=torch.float32)
    one_hot.scatter_(1, index.unsqueeze(1), 1.0)
    return one_hot if contain_dontcare_label else one_hot[:, :num_classes]


def resize_labels(labels: torch.Tensor, size: tuple[int, int] | torch.Size) -> torch.Tensor:
    """N x H x W class ids resized (nearest, so ids stay ids) to `size`; unchanged when equal."""
    if tuple(labels.shape[-2:]) == tuple(size):
        return labels
    return F.interpolate(labels[:, None].float(), size=tuple(size), mode="nearest")[:, 0].to(labels.dtype)


def resize_one_hot(labels: torch.Tensor, size) -> torch.Tensor:
    """N x C x H x W label channels resized as F.interpolate(mode="nearest") does (resize_labels:
    class ids). A strided view where the map is an integer multiple of `size` (nearest then picks
    source pixel = destination pixel x factor): on CPU, nearest downsampling of a contiguous
    150-channel map costs about 20 ms whatever the output size, more than a narrow generator's
    convolutions (a 151-class SPADE generator's step 1.65x faster, the output equal)."""
    height, width = labels.shape[-2:]
    if height % size[0] == 0 and width % size[1] == 0:
        return labels[..., :: height // size[0], :: width // size[1]]
    return F.interpolate(labels, size=size, mode="nearest")


class SPADE(nn.Module):
    """norm(x) * (1 + gamma(labels)) + beta(labels), gamma and beta per pixel and channel."""

    def __init__(self, channels: int, label_channels: int, hidden: int = 128, param_free_norm: str = "batch",
                 kernel_size: int = 3):
        super().__init__()
        if param_free_norm not in PARAM_FREE_NORMS:
            raise ValueError(f"param_free_norm: unknown {param_free_norm!r}; choose one of "
                             f"{', '.join(PARAM_FREE_NORMS)}")
        self.norm = (nn.BatchNorm2d(channels, affine=False) if param_free_norm == "batch"
                     else nn.InstanceNorm2d(channels, affine=False))
        padding = kernel_size // 2
        self.shared = nn.Sequential(nn.Conv2d(label_channels, hidden, kernel_size, padding=padding), nn.ReLU())
        self.gamma = nn.Conv2d(hidden, channels, kernel_size, padding=padding)
        self.beta = nn.Conv2d(hidden, channels, kernel_size, padding=padding)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        normalised = self.norm(x)
        labels = resize_one_hot(labels, x.shape[-2:])
        hidden = self.shared(labels)
        return normalised * (1 + self.gamma(hidden)) + self.beta(hidden)


class SPADEResBlock(nn.Module):
    """x + conv(act(SPADE(conv(act(SPADE(x)))))), with a learned SPADE + 1x1 shortcut when
    in_channels != out_channels (the middle width is the smaller of the two, as SPADE)."""

    def __init__(self, in_channels: int, out_channels: int, label_channels: int, spectral_norm: bool = False,
                 hidden: int = 128, param_free_norm: str = "batch"):
        super().__init__()
        middle = min(in_channels, out_channels)
        self.learned_shortcut = in_channels != out_channels
        self.conv_0 = nn.Conv2d(in_channels, middle, 3, padding=1)
        self.conv_1 = nn.Conv2d(middle, out_channels, 3, padding=1)
        self.norm_0 = SPADE(in_channels, label_channels, hidden, param_free_norm)
        self.norm_1 = SPADE(middle, label_channels, hidden, param_free_norm)
        if self.learned_shortcut:
            self.conv_s = nn.Conv2d(in_channels, out_channels, 1, bias=False)
            self.norm_s = SPADE(in_channels, label_channels, hidden, param_free_norm)
        if spectral_norm:
            for conv in (self.conv_0, self.conv_1, *([self.conv_s] if self.learned_shortcut else [])):
                apply_spectral_norm(conv)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        shortcut = self.conv_s(self.norm_s(x, labels)) if self.learned_shortcut else x
        dx = self.conv_0(F.leaky_relu(self.norm_0(x, labels), 0.2))
        dx = self.conv_1(F.leaky_relu(self.norm_1(dx, labels), 0.2))
        return shortcut + dx


def start_size(image_size: int | Sequence[int], num_up_layers: int) -> tuple[int, int]:
    """The (height, width) the generator starts at: the image size / 2**num_up_layers, exact."""
    height, width = (image_size, image_size) if isinstance(image_size, int) else (int(image_size[0]), int(image_size[1]))
    factor = 2**num_up_layers
    if num_up_layers < 0 or height % factor or width % factor or height < factor or width < factor:
        raise ValueError(f"image_size {height}x{width} does not fit num_up_layers {num_up_layers}: both sides "
                         f"must be positive multiples of 2**num_up_layers = {factor}")
    return height // factor, width // factor


def block_plan(layout: str, num_up_layers: int | None, num_upsampling_layers: str,
               base_channels: int) -> tuple[int, list[tuple[int, int]], tuple[bool, ...]]:
    """(x2 upsamplings, each block's (in, out) channels, whether a x2 upsampling follows each block).

    oasis: num_up_layers + 1 blocks (num_up_layers 5 by default), an upsampling after all but the last; block i
    outputs base_channels * min(16, 2**(num_up_layers - i)). spade (SPADE's generator): a head and
    two middle blocks at 16 x base_channels, then up blocks halving it down to 1 x (a fifth, to
    1/2 x, with num_upsampling_layers `most`); an upsampling after the head, the second middle
    block and every up block but the last, plus after the first middle block with `more` and
    `most`, and after the fourth up block with `most`: 5, 6 or 7 in all.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(map(repr, LAYOUTS))}")
    if layout == "oasis":
        ups = 5 if num_up_layers is None else num_up_layers
        widths = [base_channels * min(MAX_WIDTH_MULTIPLIER, 2 ** (ups - i)) for i in range(ups + 1)]
        return ups, [(widths[max(i - 1, 0)], widths[i]) for i in range(ups + 1)], (True,) * ups + (False,)
    if num_upsampling_layers not in SPADE_UPSAMPLINGS:
        raise ValueError(f"unknown num_upsampling_layers {num_upsampling_layers!r}; choose one of "
                         f"{', '.join(map(repr, SPADE_UPSAMPLINGS))}")
    ups = SPADE_UPSAMPLINGS[num_upsampling_layers]
    if num_up_layers is not None and num_up_layers != ups:
        raise ValueError(f"layout spade with num_upsampling_layers {num_upsampling_layers!r} makes {ups} "
                         f"upsamplings, not num_up_layers {num_up_layers}; leave num_up_layers out")
    most = num_upsampling_layers == "most"
    multipliers = [16, 16, 16, 16, 8, 4, 2, 1] + ([0.5] if most else [])
    channels = [(int(base_channels * a), int(base_channels * b)) for a, b in zip(multipliers, multipliers[1:])]
    upsample_after = (True, ups > 5, True, True, True, True) + ((True, False) if most else (False,))
    return ups, channels, upsample_after


@MODELS.register()
class SPADEGenerator(nn.Module):
    """OASIS's generator (`layout: oasis`) or SPADE's (`layout: spade`): label map (+ 3D noise) ->
    image in [-1, 1].

    forward(labels, noise=None): labels N x C x H x W float one-hot (C = num_classes, + 1 with
    contain_dontcare_label: `one_hot_labels`, + 1 with instance_edges: SPADE's instance-edge map as
    the last channel), noise N x noise_dim (None when noise_dim is 0).
    SPADE residual blocks with 2x nearest upsamplings between them, as `block_plan` lays them out:
    oasis takes `num_up_layers` (default 5), spade `num_upsampling_layers` (normal / more / most:
    5 / 6 / 7 upsamplings; SPADE has no noise: noise_dim 0).
    """

    def __init__(self, num_classes: int, contain_dontcare_label: bool = False, image_size: int | Sequence[int] = 256,
                 base_channels: int = 64, num_up_layers: int | None = None, noise_dim: int = 64,
                 spectral_norm: bool = True, out_channels: int = 3, spade_hidden: int = 128,
                 param_free_norm: str = "batch", layout: str = "oasis", num_upsampling_layers: str = "normal",
                 instance_edges: bool = False):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if noise_dim < 0:
            raise ValueError(f"noise_dim must be >= 0 (0: no noise), got {noise_dim}")
        num_up_layers, channels, self.upsample_after = block_plan(layout, num_up_layers, num_upsampling_layers,
                                                                  base_channels)
        self.start_height, self.start_width = start_size(image_size, num_up_layers)
        self.num_up_layers = num_up_layers
        self.size_divisor = 2**num_up_layers  # what a label map's sides must be multiples of (inference pads to it)
        # the (height, width) it trains at: the start-up check holds the training data to it
        self.image_size = (self.start_height * self.size_divisor, self.start_width * self.size_divisor)
        self.num_classes = num_classes
        self.contain_dontcare_label = bool(contain_dontcare_label)
        self.instance_edges = bool(instance_edges)
        self.label_channels = num_classes + int(self.contain_dontcare_label) + int(self.instance_edges)
        self.noise_dim = noise_dim
        conditioning = self.label_channels + noise_dim
        self.first = nn.Conv2d(conditioning, channels[0][0], 3, padding=1)
        self.blocks = nn.ModuleList(
            SPADEResBlock(fin, fout, conditioning, spectral_norm, spade_hidden, param_free_norm)
            for fin, fout in channels)
        self.to_image = nn.Conv2d(channels[-1][1], out_channels, 3, padding=1)

    def conditioning(self, labels: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """The label map with the noise vector broadcast over its pixels and concatenated (3D noise)."""
        if labels.dim() != 4 or labels.shape[1] != self.label_channels:
            raise ValueError(f"labels must be N x {self.label_channels} x H x W one-hot maps "
                             f"(num_classes {self.num_classes}, contain_dontcare_label "
                             f"{self.contain_dontcare_label}{', instance_edges True' if self.instance_edges else ''}), "
                             f"got shape {tuple(labels.shape)}")
        if self.noise_dim == 0:
            if noise is not None:
                raise ValueError("this generator has noise_dim 0 and takes no noise; pass noise=None")
            return labels
        if noise is None or tuple(noise.shape) != (labels.shape[0], self.noise_dim):
            shape = None if noise is None else tuple(noise.shape)
            raise ValueError(f"noise must be N x noise_dim = {labels.shape[0]} x {self.noise_dim}, got {shape}")
        spread = noise.to(labels.dtype)[:, :, None, None].expand(-1, -1, *labels.shape[-2:])
        return torch.cat([labels, spread], dim=1)

    def forward(self, labels: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        condition = self.conditioning(labels, noise)
        # Any label-map size the depth allows (inference may use another size than training's):
        # checked here, then resized by a factor, not to a size, so that a traced export keeps
        # following the input's size (nearest by 1/2**depth picks the same pixels as by size).
        start_size(tuple(labels.shape[-2:]), self.num_up_layers)
        x = self.first(F.interpolate(condition, scale_factor=1 / self.size_divisor, mode="nearest"))
        for block, upsample in zip(self.blocks, self.upsample_after):
            x = block(x, condition)
            if upsample:
                x = F.interpolate(x, scale_factor=2, mode="nearest")
        return torch.tanh(self.to_image(F.leaky_relu(x, 0.2)))

"""Building blocks shared by the networks in this package."""

from __future__ import annotations

from torch import nn

NORMS = ("bn", "gn", "in", "in_affine", "none")


def build_norm(norm: str, channels: int) -> nn.Module:
    """A 2-d normalisation layer by short name: "bn", "gn", "in", "in_affine" or "none" (identity).

    "gn" uses the largest group count <= 32 that divides `channels` (32 for the usual
    power-of-two widths), so any width works. "in" is InstanceNorm2d without a learned scale
    and shift, as in the official pix2pix/CycleGAN code (slightly faster too, see
    benchmarks/helpers/gan_networks.py); "in_affine" adds them.
    """
    if norm == "bn":
        return nn.BatchNorm2d(channels)
    if norm == "gn":
        groups = max(g for g in range(1, min(32, channels) + 1) if channels % g == 0)
        return nn.GroupNorm(groups, channels)
    if norm in ("in", "in_affine"):
        return nn.InstanceNorm2d(channels, affine=norm == "in_affine")
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {norm!r}; choose one of {', '.join(repr(n) for n in NORMS)}")


class ConvNormAct(nn.Sequential):
    """3x3 conv -> norm -> ReLU; the conv has no bias when a norm follows (the norm's shift replaces it)."""

    def __init__(self, in_channels: int, out_channels: int, norm: str = "bn"):
        super().__init__(
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=norm == "none"),
            build_norm(norm, out_channels),
            nn.ReLU(inplace=True),
        )


def init_gan_weights_(module: nn.Module, std: float = 0.02) -> nn.Module:
    """The DCGAN / pix2pix initialisation, in place: conv weights ~ N(0, std), normalisation
    scales ~ N(1, std), biases 0. GANs are sensitive to it; PyTorch's defaults train slower."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.normal_(layer.weight, 0.0, std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        elif isinstance(layer, (nn.BatchNorm2d, nn.InstanceNorm2d, nn.GroupNorm)) and layer.weight is not None:
            nn.init.normal_(layer.weight, 1.0, std)
            nn.init.zeros_(layer.bias)
    return module

"""Writes tests/data/fingerprints/*.json: each official network's parameter shapes, derived once from
the official layer definitions, written out here as layer lists (facts, not code: no class of the
official repositories is used or copied), and torchvision's own models for DeepLabV3.

    python tests/scripts/derive_fingerprints.py      # then review the diff and commit it

Each file holds the official network and options, where they come from, the framework config node
that should build the same layout, the parameter count and the multiset of parameter shapes
({"64x3x7x7": 1, ...}). tests/test_fingerprints.py builds each node on the meta device and
compares. The layer lists follow the official code's order; only the multiset is compared.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "fingerprints"
CYCLEGAN = "junyanz/pytorch-CycleGAN-and-pix2pix models/networks.py"
PIX2PIXHD = "NVIDIA/pix2pixHD models/networks.py (commit 14b3b3c)"


def conv(cin: int, cout: int, k: int, bias: bool) -> list[tuple[int, ...]]:
    return [(cout, cin, k, k)] + ([(cout,)] if bias else [])


def conv_transpose(cin: int, cout: int, k: int, bias: bool) -> list[tuple[int, ...]]:
    return [(cin, cout, k, k)] + ([(cout,)] if bias else [])  # torch keeps in-channels first here


def affine_norm(channels: int) -> list[tuple[int, ...]]:
    return [(channels,), (channels,)]  # BatchNorm2d(affine=True): weight and bias


def resnet_generator(cin: int, cout: int, ngf: int, blocks: int, downs: int) -> list[tuple[int, ...]]:
    """CycleGAN's ResnetGenerator and pix2pixHD's GlobalGenerator under instance norm (affine
    False: no parameters; so every conv keeps its bias): 7x7 stem, 3x3 stride-2 downs, residual
    blocks of two 3x3 convs, 3x3 transposed ups, 7x7 to the output."""
    shapes = conv(cin, ngf, 7, True)
    for i in range(downs):
        shapes += conv(ngf * 2**i, ngf * 2**(i + 1), 3, True)
    width = ngf * 2**downs
    for _ in range(blocks):
        shapes += conv(width, width, 3, True) + conv(width, width, 3, True)
    for i in range(downs):
        shapes += conv_transpose(width // 2**i, width // 2**(i + 1), 3, True)
    return shapes + conv(ngf, cout, 7, True)


def n_layer_discriminator(cin: int, ndf: int, n_layers: int, batch_norm: bool) -> list[tuple[int, ...]]:
    """NLayerDiscriminator: use_bias only under instance norm (no affine); widths capped at 8 ndf;
    the first and the last conv always biased and without norm."""
    shapes = conv(cin, ndf, 4, True)
    previous = ndf
    for n in range(1, n_layers + 1):  # n_layers - 1 stride-2 convs, then the stride-1 one
        width = ndf * min(2**n, 8)
        shapes += conv(previous, width, 4, not batch_norm) + (affine_norm(width) if batch_norm else [])
        previous = width
    return shapes + conv(previous, 1, 4, True)


def unet_generator(cin: int, cout: int, num_downs: int, ngf: int) -> list[tuple[int, ...]]:
    """UnetGenerator under batch norm (use_bias False). From the innermost block out: innermost
    (8ngf, 8ngf: down conv, up transposed conv + norm), num_downs - 5 middle blocks (8ngf, 8ngf),
    then (4ngf, 8ngf), (2ngf, 4ngf), (ngf, 2ngf) with down norm and up norm, and the outermost
    (down conv from the input, no norm; a biased transposed conv from 2ngf to the output). A
    block's down norm exists only where it is used, so innermost and outermost have none."""
    shapes = conv(8 * ngf, 8 * ngf, 4, False) + conv_transpose(8 * ngf, 8 * ngf, 4, False) + affine_norm(8 * ngf)
    pairs = [(8 * ngf, 8 * ngf)] * (num_downs - 5) + [(4 * ngf, 8 * ngf), (2 * ngf, 4 * ngf), (ngf, 2 * ngf)]
    for outer, inner in pairs:
        shapes += conv(outer, inner, 4, False) + affine_norm(inner)
        shapes += conv_transpose(2 * inner, outer, 4, False) + affine_norm(outer)
    return shapes + conv(cin, ngf, 4, False) + conv_transpose(2 * ngf, cout, 4, True)


def torchvision_shapes(builder: str, **kwargs) -> list[tuple[int, ...]]:
    import torch
    from torchvision.models import segmentation

    with torch.device("meta"):
        network = getattr(segmentation, builder)(weights=None, weights_backbone=None, **kwargs)
    return [tuple(p.shape) for p in network.parameters()]


def fingerprints() -> dict[str, dict]:
    deeplab_source = "torchvision.models.segmentation.{}(weights=None, weights_backbone=None, num_classes=21, " \
                     "aux_loss=True): ResNet with replace_stride_with_dilation [False, True, True] (output stride 8)"
    return {
        "cyclegan_resnet_9blocks": dict(
            official="ResnetGenerator via define_G(3, 3, 64, 'resnet_9blocks', norm='instance')", source=CYCLEGAN,
            node={"type": "ResnetGenerator", "in_channels": 3, "out_channels": 3, "base_channels": 64,
                  "num_blocks": 9, "num_downsampling": 2, "norm": "in"},
            shapes=resnet_generator(3, 3, 64, blocks=9, downs=2)),
        "cyclegan_patchgan": dict(
            official="NLayerDiscriminator via define_D(3, 64, 'basic', norm='instance')", source=CYCLEGAN,
            node={"type": "PatchGANDiscriminator", "in_channels": 3, "base_channels": 64, "num_layers": 3,
                  "norm": "in"},
            shapes=n_layer_discriminator(3, 64, 3, batch_norm=False)),
        "pix2pix_unet_256": dict(
            official="UnetGenerator via define_G(3, 3, 64, 'unet_256', norm='batch', use_dropout=True)",
            source=CYCLEGAN,
            node={"type": "UNetGenerator", "in_channels": 3, "out_channels": 3, "base_channels": 64,
                  "num_downs": 8, "norm": "bn", "dropout": 0.5, "edge_bias": False},
            shapes=unet_generator(3, 3, 8, 64)),
        "pix2pix_patchgan": dict(
            official="NLayerDiscriminator via define_D(6, 64, 'basic', norm='batch')", source=CYCLEGAN,
            node={"type": "PatchGANDiscriminator", "in_channels": 6, "base_channels": 64, "num_layers": 3,
                  "norm": "bn"},
            shapes=n_layer_discriminator(6, 64, 3, batch_norm=True)),
        "pix2pixhd_global": dict(
            official="GlobalGenerator(36, 3, ngf=64, n_downsampling=4, n_blocks=9, norm 'instance') "
                     "(define_G netG='global', n_downsample_global 4, n_blocks_global 9; 36 = 35 labels + edge map)",
            source=PIX2PIXHD,
            node={"type": "ResnetGenerator", "in_channels": 36, "out_channels": 3, "base_channels": 64,
                  "num_blocks": 9, "num_downsampling": 4, "norm": "in"},
            shapes=resnet_generator(36, 3, 64, blocks=9, downs=4)),
        "deeplabv3_resnet50": dict(
            official="deeplabv3_resnet50", source=deeplab_source.format("deeplabv3_resnet50"),
            node={"type": "DeepLabV3", "num_classes": 21, "backbone": "resnet50", "aux_loss": True},
            shapes=torchvision_shapes("deeplabv3_resnet50", num_classes=21, aux_loss=True)),
        "deeplabv3_resnet101": dict(
            official="deeplabv3_resnet101", source=deeplab_source.format("deeplabv3_resnet101"),
            node={"type": "DeepLabV3", "num_classes": 21, "backbone": "resnet101", "aux_loss": True},
            shapes=torchvision_shapes("deeplabv3_resnet101", num_classes=21, aux_loss=True)),
    }


def shape_key(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, entry in fingerprints().items():
        shapes = entry.pop("shapes")
        entry["parameters"] = sum(math.prod(s) for s in shapes)
        entry["shapes"] = dict(sorted(Counter(map(shape_key, shapes)).items()))
        (OUT / f"{name}.json").write_text(json.dumps(entry, indent=1) + "\n")
        print(f"{name}: {entry['parameters']:,} parameters", file=sys.stderr)


if __name__ == "__main__":
    main()

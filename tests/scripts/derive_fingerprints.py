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


def spade_norm(channels: int, label_channels: int, hidden: int = 128) -> list[tuple[int, ...]]:
    """SPADE (3x3, hidden 128): a shared conv + ReLU, then gamma and beta convs; the
    parameter-free batch norm has no parameters."""
    return conv(label_channels, hidden, 3, True) + conv(hidden, channels, 3, True) * 2


def spade_resblock(fin: int, fout: int, label_channels: int) -> list[tuple[int, ...]]:
    """SPADE's and OASIS's residual block: middle width min(fin, fout); conv_0, conv_1 biased;
    a bias-free 1x1 conv_s and its SPADE where the width changes (spectral norm keeps shapes)."""
    middle = min(fin, fout)
    shapes = conv(fin, middle, 3, True) + conv(middle, fout, 3, True)
    shapes += spade_norm(fin, label_channels) + spade_norm(middle, label_channels)
    if fin != fout:
        shapes += conv(fin, fout, 1, False) + spade_norm(fin, label_channels)
    return shapes


def spade_family_generator(label_channels: int, noise: int, multipliers: list[int], nf: int = 64):
    """fc: 3x3 conv from the (label + noise) map to 16 nf; one residual block per consecutive pair
    of widths; conv_img: 3x3 to RGB. SPADE (no VAE): [16, 16, 16, 16, 8, 4, 2, 1] (head, two
    middle blocks, four up blocks, num_upsampling_layers normal); OASIS: [16, 16, 16, 8, 4, 2, 1]."""
    conditioning = label_channels + noise
    shapes = conv(conditioning, multipliers[0] * nf, 3, True)
    for a, b in zip(multipliers, multipliers[1:]):
        shapes += spade_resblock(a * nf, b * nf, conditioning)
    return shapes + conv(multipliers[-1] * nf, 3, 3, True)


def spade_multiscale_discriminator(cin: int, scales: int, n_layers_d: int = 4, ndf: int = 64):
    """SPADE's NLayerDiscriminator per scale (norm_D spectralinstance): a plain biased first conv,
    n_layers_D - 1 spectral-norm convs whose bias the norm removes, widths min(2x, 512), a plain
    biased conv to one logit; all 4x4 (padding 2: no parameters)."""
    shapes, width = conv(cin, ndf, 4, True), ndf
    for _ in range(1, n_layers_d):
        shapes += conv(width, min(2 * width, 512), 4, False)
        width = min(2 * width, 512)
    return (shapes + conv(width, 1, 4, True)) * scales


def oasis_residual_block(fin: int, fout: int) -> list[tuple[int, ...]]:
    shapes = conv(fin, fout, 3, True) + conv(fout, fout, 3, True)
    return shapes + (conv(fin, fout, 1, True) if fin != fout else [])


def oasis_discriminator(outputs: int, channels=(3, 128, 128, 256, 256, 512, 512)):
    """OASIS_Discriminator (num_res_blocks 6): down blocks channels[i] -> channels[i+1]; up blocks
    512 -> 512, then 2 x channels[-1-i] -> channels[-2-i] for i in 1..4, then 2 x 128 -> 64; a
    biased 1x1 conv to semantic_nc + 1 outputs."""
    shapes = []
    for i in range(6):
        shapes += oasis_residual_block(channels[i], channels[i + 1])
    shapes += oasis_residual_block(channels[-1], channels[-2])
    for i in range(1, 5):
        shapes += oasis_residual_block(2 * channels[-1 - i], channels[-2 - i])
    return shapes + oasis_residual_block(2 * channels[1], 64) + conv(64, outputs, 1, True)


MMSEG = "open-mmlab/mmsegmentation (commit 0c87f7a: sep_aspp_head.py; configs/_base_/models/deeplabv3plus_r50-d8.py)"


def mmseg_resnet50() -> list[tuple[int, ...]]:
    """mmseg's ResNet (no deep stem: the R-50b of its r50b-d8 configs): a 7x7 stem conv + BN, then
    [3, 4, 6, 3] bottlenecks (1x1, 3x3, 1x1 convs + BN, expansion 4), each stage's first with a 1x1
    downsample + BN."""
    shapes, inplanes = conv(3, 64, 7, False) + affine_norm(64), 64
    for planes, blocks in zip([64, 128, 256, 512], [3, 4, 6, 3]):
        for block in range(blocks):
            shapes += conv(inplanes, planes, 1, False) + affine_norm(planes) + conv(planes, planes, 3, False)
            shapes += affine_norm(planes) + conv(planes, 4 * planes, 1, False) + affine_norm(4 * planes)
            shapes += (conv(inplanes, 4 * planes, 1, False) + affine_norm(4 * planes)) if block == 0 else []
            inplanes = 4 * planes
    return shapes


def separable_module(cin: int, cout: int) -> list[tuple[int, ...]]:
    """mmcv's DepthwiseSeparableConvModule with a norm: depthwise 3x3 (cin x 1 x 3 x 3) + BN, pointwise + BN."""
    return [(cin, 1, 3, 3)] + affine_norm(cin) + conv(cin, cout, 1, False) + affine_norm(cout)


def mmseg_deeplabv3plus_head(classes: int, channels: int = 512, rates: int = 3, c1: int = 48) -> list[tuple[int, ...]]:
    """DepthwiseSeparableASPPHead (in 2048, c1_in 256): image pool and 1x1 branch, a separable branch
    per rate, ASPPHead's dense 3x3 bottleneck, c1_bottleneck, two separable fusion blocks, biased
    conv_seg; the aux FCNHead (1024 -> 256, 3x3, conv_seg). ConvModule: no bias before a norm."""
    shapes = (conv(2048, channels, 1, False) + affine_norm(channels)) * 2  # image pool, dilation 1
    for _ in range(rates):
        shapes += separable_module(2048, channels)
    shapes += conv((rates + 2) * channels, channels, 3, False) + affine_norm(channels)
    shapes += conv(256, c1, 1, False) + affine_norm(c1)
    shapes += separable_module(channels + c1, channels) + separable_module(channels, channels)
    shapes += conv(channels, classes, 1, True)
    return shapes + conv(1024, 256, 3, False) + affine_norm(256) + conv(256, classes, 1, True)


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
        **spade_and_oasis(),
        "deeplabv3plus_r50b_d8_cityscapes": dict(
            official="deeplabv3plus_r50b-d8_4xb2-80k_cityscapes-512x1024: ResNet depth 50 (torchvision://resnet50), "
                     "DepthwiseSeparableASPPHead 512, (1, 12, 24, 36), c1 48, FCNHead aux, 19 classes", source=MMSEG,
            node={"type": "DeepLabV3Plus", "encoder": "resnet50", "num_classes": 19, "output_stride": 8,
                  "atrous_rates": [12, 24, 36], "aspp_channels": 512, "low_level_channels": 48,
                  "aux_loss_weight": 0.4, "head_style": "mmseg"},
            shapes=mmseg_resnet50() + mmseg_deeplabv3plus_head(19)),
        "deeplabv3_resnet50": dict(
            official="deeplabv3_resnet50", source=deeplab_source.format("deeplabv3_resnet50"),
            node={"type": "DeepLabV3", "num_classes": 21, "backbone": "resnet50", "aux_loss": True},
            shapes=torchvision_shapes("deeplabv3_resnet50", num_classes=21, aux_loss=True)),
        "deeplabv3_resnet101": dict(
            official="deeplabv3_resnet101", source=deeplab_source.format("deeplabv3_resnet101"),
            node={"type": "DeepLabV3", "num_classes": 21, "backbone": "resnet101", "aux_loss": True},
            shapes=torchvision_shapes("deeplabv3_resnet101", num_classes=21, aux_loss=True)),
    }


def spade_and_oasis() -> dict[str, dict]:
    spade, oasis = "NVlabs/SPADE models/networks/*.py", "boschresearch/OASIS models/*.py (commit 307c852)"
    xavier = {"scheme": "xavier", "gain": 0.02}  # both codes' init_type xavier, init_variance 0.02
    spade_g = {"type": "SPADEGenerator", "base_channels": 64, "noise_dim": 0, "spectral_norm": True,
               "spade_hidden": 128, "param_free_norm": "batch", "layout": "spade",
               "num_upsampling_layers": "normal", "weight_init": xavier}
    oasis_g = {"type": "SPADEGenerator", "base_channels": 64, "num_up_layers": 5, "noise_dim": 64,
               "spectral_norm": True, "spade_hidden": 128, "param_free_norm": "batch", "weight_init": xavier}
    return {
        "spade_generator_ade20k": dict(
            official="SPADEGenerator, ADE20K: semantic_nc 151 (150 + don't-care), ngf 64, no VAE, "
                     "norm_G spectralspadesyncbatch3x3, num_upsampling_layers normal", source=spade,
            node={**spade_g, "num_classes": 150, "contain_dontcare_label": True, "image_size": 256},
            shapes=spade_family_generator(151, 0, [16, 16, 16, 16, 8, 4, 2, 1])),
        "spade_generator_cityscapes": dict(
            official="SPADEGenerator, Cityscapes: semantic_nc 36 (35 labels + the instance edge map)",
            source=spade,
            note="the synthesis task has no instance edge map yet: its channel is stood in for by the "
                 "don't-care channel, which has the same shapes",
            node={**spade_g, "num_classes": 35, "contain_dontcare_label": True, "image_size": [256, 512]},
            shapes=spade_family_generator(36, 0, [16, 16, 16, 16, 8, 4, 2, 1])),
        "spade_discriminator_ade20k": dict(
            official="MultiscaleDiscriminator, num_D 2, n_layers_D 4, ndf 64, norm_D spectralinstance; "
                     "input 154 = 151 label channels + 3 image channels", source=spade,
            node={"type": "MultiScaleDiscriminator", "in_channels": 154, "num_scales": 2, "base_channels": 64,
                  "num_layers": 3, "norm": "spectralinstance", "padding": 2, "weight_init": xavier},
            shapes=spade_multiscale_discriminator(154, scales=2)),
        "oasis_generator_ade20k": dict(
            official="OASIS_Generator, ADE20K: semantic_nc 151, z_dim 64, channels_G 64, num_res_blocks 6",
            source=oasis,
            node={**oasis_g, "num_classes": 150, "contain_dontcare_label": True, "image_size": 256},
            shapes=spade_family_generator(151, 64, [16, 16, 16, 8, 4, 2, 1])),
        "oasis_generator_cityscapes": dict(
            official="OASIS_Generator, Cityscapes: semantic_nc 35 (34 + don't-care), z_dim 64", source=oasis,
            node={**oasis_g, "num_classes": 34, "contain_dontcare_label": True, "image_size": [256, 512]},
            shapes=spade_family_generator(35, 64, [16, 16, 16, 8, 4, 2, 1])),
        "oasis_discriminator_ade20k": dict(
            official="OASIS_Discriminator, ADE20K: 152 outputs (semantic_nc 151 + the fake class)", source=oasis,
            note="with this framework's gan_loss: oasis, num_classes is the task's classes + 1 (151 for "
                 "ADE20K: 64 + 1 parameters fewer); OASIS's code also gives the don't-care label a channel",
            node={"type": "OASISDiscriminator", "num_classes": 152, "in_channels": 3, "weight_init": xavier},
            shapes=oasis_discriminator(152)),
    }


def shape_key(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def rendered() -> dict[str, str]:
    """{file name: its JSON text}, as main writes them."""
    files = {}
    for name, entry in fingerprints().items():
        shapes = entry.pop("shapes")
        entry["parameters"] = sum(math.prod(s) for s in shapes)
        entry["shapes"] = dict(sorted(Counter(map(shape_key, shapes)).items()))
        files[f"{name}.json"] = json.dumps(entry, indent=1) + "\n"
    return files


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for file_name, text in rendered().items():
        (OUT / file_name).write_text(text)
        print(f"{file_name}: {json.loads(text)['parameters']:,} parameters", file=sys.stderr)


if __name__ == "__main__":
    main()

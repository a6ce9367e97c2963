"""The official layouts beyond their parameter counts (tests/test_fingerprints.py): SPADE's generator
schedule, SPADE's discriminator norm and padding, OASIS's discriminator, pix2pix's unet_256 biases,
at small widths so that they run forward on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import projects.pix2pix  # noqa: F401  (UNetGenerator)
from framework.models import MultiScaleDiscriminator, OASISDiscriminator, SPADEGenerator
from framework.models.discriminators import min_image_side
from framework.registry import MODELS


@pytest.mark.parametrize("schedule, upsamplings, blocks", [("normal", 5, 7), ("more", 6, 7), ("most", 7, 8)])
def test_spade_layout_upsamples_as_spade(schedule, upsamplings, blocks):
    g = SPADEGenerator(num_classes=3, image_size=2**upsamplings, base_channels=4, noise_dim=0, spade_hidden=4,
                       spectral_norm=False, layout="spade", num_upsampling_layers=schedule)
    assert g.num_up_layers == upsamplings and len(g.blocks) == blocks
    widths = [(b.conv_0.in_channels, b.conv_1.out_channels) for b in g.blocks]
    assert widths[:4] == [(64, 64), (64, 64), (64, 64), (64, 32)]  # head, two middle blocks at 16 nf
    assert widths[-1] == ((4, 2) if schedule == "most" else (8, 4))
    labels = torch.zeros(2, 3, 2**upsamplings, 2**upsamplings)
    labels[:, 0] = 1
    assert g(labels).shape == (2, 3, 2**upsamplings, 2**upsamplings)


def test_spade_layout_refuses_a_conflicting_depth():
    with pytest.raises(ValueError, match=r"num_upsampling_layers 'more' makes 6 upsamplings, not num_up_layers 5"):
        SPADEGenerator(num_classes=2, layout="spade", num_upsampling_layers="more", num_up_layers=5)
    with pytest.raises(ValueError, match=r"unknown num_upsampling_layers 'mostest'"):
        SPADEGenerator(num_classes=2, layout="spade", num_upsampling_layers="mostest")
    with pytest.raises(ValueError, match=r"unknown layout 'spad'"):
        SPADEGenerator(num_classes=2, layout="spad")


def test_spade_discriminator_norm_leaves_first_and_last_conv_plain():
    d = MultiScaleDiscriminator(in_channels=5, num_scales=2, base_channels=4, num_layers=3,
                                norm="spectralinstance", padding=2)
    for scale in d.scales:
        convs = [block[0] for block in scale.blocks] + [scale.head]
        normalised = [parametrize.is_parametrized(c, "weight") for c in convs]
        assert normalised == [False, True, True, True, False]
        assert [c.bias is None for c in convs] == [False, True, True, True, False]
        assert all(c.padding == (2, 2) for c in convs)
        norms = [block[1] for block in scale.blocks[1:]]
        assert all(isinstance(n, nn.InstanceNorm2d) and not n.affine for n in norms)
    # padding 2 grows the side at the stride-1 convs: SPADE's 256 image gives 35x35 logits, not 30x30
    assert d(torch.randn(1, 5, 256, 256)).logits[0].shape == (1, 1, 35, 35)


@pytest.mark.parametrize("padding", [1, 2])
def test_min_image_side_is_the_smallest_that_runs(padding):
    d = MultiScaleDiscriminator(in_channels=3, num_scales=2, base_channels=2, num_layers=2, norm="in",
                                padding=padding)
    side = min_image_side(2, 2, padding)
    d(torch.randn(1, 3, side, side))
    with pytest.raises(ValueError, match="too small"):
        d(torch.randn(1, 3, side - 1, side - 1))


def test_oasis_discriminator_segments_at_the_input_size():
    d = OASISDiscriminator(num_classes=5, widths=(4, 4, 8, 8), last_width=4)
    assert d(torch.randn(2, 3, 32, 48)).shape == (2, 5, 32, 48)
    convs = [m for m in d.modules() if isinstance(m, nn.Conv2d)]
    assert all(parametrize.is_parametrized(c, "weight") for c in convs if c is not d.head)
    assert not parametrize.is_parametrized(d.head, "weight")
    with pytest.raises(ValueError, match="multiples of 16, got 24x32"):
        d(torch.randn(1, 3, 24, 32))


def test_oasis_discriminator_gradient_reaches_every_block():
    d = OASISDiscriminator(num_classes=3, widths=(4, 8), last_width=4, spectral_norm=False)
    d(torch.randn(2, 3, 8, 8)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in d.parameters())


def test_unet_256_official_biases():
    node = {"type": "UNetGenerator", "base_channels": 2, "num_downs": 8, "norm": "bn", "dropout": 0.5}
    official = MODELS.build(dict(node, edge_bias=False))
    assert all(down[-1].bias is None for down in official.downs if isinstance(down[-1], nn.Conv2d))
    assert official.downs[0][0].bias is None and official.ups[-1][1].bias is not None  # outermost up keeps it
    assert MODELS.build(node).downs[0][0].bias is not None  # the framework default is unchanged
    dropouts = [i for i, up in enumerate(official.ups) if any(isinstance(m, nn.Dropout) for m in up)]
    assert dropouts == [1, 2, 3]  # the three 8 ngf decoder blocks below the innermost


def test_spectral_norm_key_normalises_each_conv_once():
    d = MODELS.build({"type": "MultiScaleDiscriminator", "in_channels": 3, "num_scales": 1, "base_channels": 4,
                      "norm": "spectralinstance", "padding": 2, "spectral_norm": True})
    convs = [block[0] for block in d.scales[0].blocks] + [d.scales[0].head]
    assert [len(c.parametrizations.weight) for c in convs] == [1, 1, 1, 1, 1]

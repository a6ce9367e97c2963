"""`weight_init:` on model nodes (framework/models/weight_init.py): the official schemes, drawn once
at build time, before spectral norm, with clear errors for a bad scheme or gain."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import projects.pix2pix  # noqa: F401  (PatchGANDiscriminator, UNetGenerator)
from framework.errors import ConfigError
from framework.registry import MODELS

D_NODE = {"type": "PatchGANDiscriminator", "in_channels": 6, "base_channels": 32, "num_layers": 3, "norm": "bn"}


def convs(network: nn.Module) -> list[nn.Conv2d]:
    return [m for m in network.modules() if isinstance(m, nn.Conv2d)]


def test_normal_scheme_draws_the_pix2pix_initialisation():
    torch.manual_seed(0)
    network = MODELS.build(dict(D_NODE, weight_init={"scheme": "normal", "gain": 0.5}))
    weights = torch.cat([c.weight.flatten() for c in convs(network)])
    assert weights.std().item() == pytest.approx(0.5, rel=0.02)  # the network's own draw is 0.02
    assert all(c.bias is None or not c.bias.any() for c in convs(network))
    batch_norms = [m for m in network.modules() if isinstance(m, nn.BatchNorm2d)]
    scales = torch.cat([b.weight for b in batch_norms])
    assert scales.mean().item() == pytest.approx(1.0, abs=0.1) and scales.std().item() == pytest.approx(0.5, rel=0.1)
    assert not torch.cat([b.bias for b in batch_norms]).any()
    assert network.weight_init == {"scheme": "normal", "gain": 0.5}


def test_xavier_scheme_with_the_spade_oasis_gain():
    torch.manual_seed(0)
    network = MODELS.build({"type": "UNet", "num_classes": 3, "base_channels": 16, "depth": 2,
                            "weight_init": {"scheme": "xavier", "gain": 0.02}})
    for conv in convs(network):
        if conv.weight.numel() < 2000:
            continue  # too few values to measure a spread
        fan_in, fan_out = conv.weight[0].numel(), conv.weight.shape[0] * conv.weight[0, 0].numel()
        assert conv.weight.std().item() == pytest.approx(0.02 * math.sqrt(2 / (fan_in + fan_out)), rel=0.1)


def test_default_scheme_keeps_the_networks_own_draw():
    torch.manual_seed(0)
    own = MODELS.build(D_NODE).state_dict()
    torch.manual_seed(0)
    kept = MODELS.build(dict(D_NODE, weight_init="default")).state_dict()
    assert all(torch.equal(own[k], kept[k]) for k in own)


def test_kaiming_scheme_scales_by_fan_in():
    torch.manual_seed(0)
    network = MODELS.build(dict(D_NODE, weight_init="kaiming"))
    conv = convs(network)[1]
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / conv.weight[0].numel()), rel=0.05)


def test_weight_init_comes_before_spectral_norm():
    # spectral norm's power iteration must start from the drawn weights: the normalised weight's
    # largest singular value is then 1, not the ratio of an old estimate to the new weights
    torch.manual_seed(0)
    network = MODELS.build(dict(D_NODE, norm="none", spectral_norm=True, weight_init={"scheme": "normal", "gain": 3.0}))
    network.eval()
    conv = convs(network)[1]
    assert conv.parametrizations.weight.original.std().item() == pytest.approx(3.0, rel=0.02)
    sigma = torch.linalg.matrix_norm(conv.weight.flatten(1), ord=2).item()
    assert sigma == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("value, message", [
    ("xavir", r"task\.model\.weight_init\.scheme: unknown scheme 'xavir'; did you mean 'xavier'"),
    ({"scheme": "kaiming", "gain": 0.02}, r"weight_init\.gain: the kaiming scheme takes no gain"),
    ({"scheme": "normal", "gain": -1}, r"weight_init\.gain: expected a positive number"),
    ({"scheme": "normal", "std": 0.02}, r"weight_init\.std: unknown key"),
    (0.02, r"weight_init: expected a scheme"),
])
def test_weight_init_mistakes_name_the_key(value, message):
    with pytest.raises(ConfigError, match=message):
        MODELS.build(dict(D_NODE, weight_init=value), path="task.model")


def test_weight_init_restarts_the_power_iteration_of_a_networks_own_spectral_norm():
    # SPADEGenerator applies spectral norm in its constructor, before the key is applied
    torch.manual_seed(0)
    network = MODELS.build({"type": "SPADEGenerator", "num_classes": 3, "image_size": 8, "base_channels": 4,
                            "num_up_layers": 1, "noise_dim": 0, "spade_hidden": 4, "spectral_norm": True,
                            "weight_init": {"scheme": "normal", "gain": 3.0}})
    network.eval()
    conv = network.blocks[0].conv_0
    assert conv.parametrizations.weight.original.std().item() == pytest.approx(3.0, rel=0.1)
    sigma = torch.linalg.matrix_norm(conv.weight.flatten(1), ord=2).item()
    assert sigma == pytest.approx(1.0, rel=0.1)

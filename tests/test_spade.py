"""SPADE normalisation, its residual block and the OASIS-style SPADEGenerator (framework/models/spade.py)."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from framework.errors import ConfigError
from framework.models.spade import SPADE, SPADEGenerator, SPADEResBlock, one_hot_labels, resize_labels, resize_one_hot
from framework.registry import MODELS


def test_spade_matches_the_formula_on_a_tiny_tensor():
    torch.manual_seed(0)
    spade = SPADE(channels=2, label_channels=3, hidden=4).train()
    x = torch.randn(2, 2, 4, 4)
    labels = one_hot_labels(torch.randint(0, 3, (2, 2, 2)), num_classes=3)  # 2x2: resized (nearest) to 4x4
    out = spade(x, labels)

    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    normalised = (x - mean) / torch.sqrt(var + 1e-5)
    resized = labels.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)
    hidden = F.relu(F.conv2d(resized, spade.shared[0].weight, spade.shared[0].bias, padding=1))
    gamma = F.conv2d(hidden, spade.gamma.weight, spade.gamma.bias, padding=1)
    beta = F.conv2d(hidden, spade.beta.weight, spade.beta.bias, padding=1)
    torch.testing.assert_close(out, normalised * (1 + gamma) + beta)


def test_spade_instance_norm_normalises_each_image_alone():
    torch.manual_seed(0)
    spade = SPADE(channels=2, label_channels=3, hidden=4, param_free_norm="instance")
    for conv in (spade.gamma, spade.beta):  # gamma = beta = 0: the output is the bare normalisation
        nn.init.zeros_(conv.weight)
        nn.init.zeros_(conv.bias)
    x = torch.randn(2, 2, 4, 4)
    x[1] = x[1] * 10 + 3
    out = spade(x, one_hot_labels(torch.zeros(2, 4, 4, dtype=torch.long), 3))
    expected = (x - x.mean(dim=(2, 3), keepdim=True)) / torch.sqrt(x.var(dim=(2, 3), unbiased=False, keepdim=True) + 1e-5)
    torch.testing.assert_close(out, expected)
    with pytest.raises(ValueError, match="param_free_norm: unknown 'group'"):
        SPADE(2, 3, param_free_norm="group")


def test_one_hot_labels_puts_ignored_pixels_in_the_dontcare_channel_or_nowhere():
    labels = torch.tensor([[[0, 2], [255, 1]]])
    with_dontcare = one_hot_labels(labels, num_classes=3, ignore_index=255, contain_dontcare_label=True)
    assert with_dontcare.shape == (1, 4, 2, 2) and with_dontcare.dtype == torch.float32
    assert with_dontcare[0, :, 0, 0].tolist() == [1, 0, 0, 0]
    assert with_dontcare[0, :, 0, 1].tolist() == [0, 0, 1, 0]
    assert with_dontcare[0, :, 1, 0].tolist() == [0, 0, 0, 1]  # ignore -> channel num_classes
    assert with_dontcare[0, :, 1, 1].tolist() == [0, 1, 0, 0]
    without = one_hot_labels(labels, num_classes=3, ignore_index=255, contain_dontcare_label=False)
    assert without.shape == (1, 3, 2, 2)
    assert without[0, :, 1, 0].tolist() == [0, 0, 0]
    torch.testing.assert_close(without, with_dontcare[:, :3])
    # A class id equal to another ignore value is a class, not ignored.
    assert one_hot_labels(torch.tensor([[[1]]]), 3, ignore_index=1)[0, :, 0, 0].tolist() == [0, 0, 0]
    assert one_hot_labels(torch.tensor([[[1]]]), 3, ignore_index=255)[0, :, 0, 0].tolist() == [0, 1, 0]


@pytest.mark.parametrize("size,depth", [(32, 2), ((16, 48), 3), (8, 3), ((24, 40), 3)])
def test_generator_output_shapes_for_several_sizes(size, depth):
    height, width = (size, size) if isinstance(size, int) else size
    g = SPADEGenerator(num_classes=4, contain_dontcare_label=True, image_size=size, base_channels=4,
                       num_up_layers=depth, noise_dim=3, spectral_norm=False, spade_hidden=8)
    labels = one_hot_labels(torch.randint(0, 4, (2, height, width)), 4, contain_dontcare_label=True)
    out = g(labels, torch.randn(2, 3))
    assert out.shape == (2, 3, height, width)
    assert out.abs().max() <= 1  # tanh


def test_widths_follow_the_depth_and_cap_at_sixteen_times_the_base():
    g = SPADEGenerator(num_classes=2, image_size=64, base_channels=2, num_up_layers=5, noise_dim=0,
                       spectral_norm=False, spade_hidden=4)
    assert [block.conv_1.out_channels for block in g.blocks] == [32, 32, 16, 8, 4, 2]
    assert g.first.in_channels == 2 and g.to_image.in_channels == 2


@pytest.mark.parametrize("size,depth", [(30, 2), ((32, 36), 3), (4, 3), (0, 0)])
def test_sizes_the_depth_does_not_allow_are_refused_naming_both(size, depth):
    with pytest.raises(ValueError, match=r"image_size .* does not fit num_up_layers"):
        SPADEGenerator(num_classes=2, image_size=size, num_up_layers=depth)


def test_the_size_boundary_start_size_one_is_allowed():
    g = SPADEGenerator(num_classes=2, image_size=8, base_channels=2, num_up_layers=3, noise_dim=0,
                       spectral_norm=False, spade_hidden=4)
    assert (g.start_height, g.start_width) == (1, 1)


def _small_generator(noise_dim: int) -> SPADEGenerator:
    torch.manual_seed(0)
    return SPADEGenerator(num_classes=3, image_size=16, base_channels=4, num_up_layers=2, noise_dim=noise_dim,
                          spectral_norm=False, spade_hidden=8).eval()


def test_without_noise_the_image_depends_on_the_labels_only():
    g = _small_generator(noise_dim=0)
    labels = one_hot_labels(torch.randint(0, 3, (2, 16, 16)), 3)
    with pytest.raises(ValueError, match="noise_dim 0 and takes no noise"):
        g(labels, torch.randn(2, 5))
    first, second = g(labels, None), g(labels)
    torch.testing.assert_close(first, second)
    other = one_hot_labels(torch.randint(0, 3, (2, 16, 16)), 3)
    assert not torch.allclose(g(other), first)


def test_noise_changes_the_image_and_the_same_noise_repeats_it():
    g = _small_generator(noise_dim=4)
    labels = one_hot_labels(torch.randint(0, 3, (2, 16, 16)), 3)
    noise = torch.randn(2, 4)
    torch.testing.assert_close(g(labels, noise), g(labels, noise.clone()))
    assert (g(labels, noise) - g(labels, torch.randn(2, 4))).abs().mean() > 1e-3
    with pytest.raises(ValueError, match="noise must be N x noise_dim = 2 x 4, got None"):
        g(labels)
    with pytest.raises(ValueError, match=r"labels must be N x 3 x H x W"):
        g(one_hot_labels(torch.zeros(2, 16, 16, dtype=torch.long), 3, contain_dontcare_label=True), noise)


def _parametrised(module: nn.Module) -> set[str]:
    return {name for name, m in module.named_modules() if hasattr(m, "parametrizations")}


def test_spectral_norm_on_the_block_convs_only_when_asked():
    block = SPADEResBlock(4, 2, label_channels=3, spectral_norm=True, hidden=4)
    assert _parametrised(block) == {"conv_0", "conv_1", "conv_s"}
    assert _parametrised(SPADEResBlock(4, 2, label_channels=3, spectral_norm=False, hidden=4)) == set()
    assert _parametrised(SPADEResBlock(2, 2, label_channels=3, spectral_norm=True, hidden=4)) == {"conv_0", "conv_1"}
    g = MODELS.build({"type": "SPADEGenerator", "num_classes": 2, "image_size": 8, "base_channels": 2,
                      "num_up_layers": 1, "noise_dim": 2, "spectral_norm": True, "spade_hidden": 4})
    assert _parametrised(g) == {f"blocks.{i}.{c}" for i in range(2) for c in ("conv_0", "conv_1")} | {"blocks.1.conv_s"}  # widths 4, 2
    plain = MODELS.build({"type": "SPADEGenerator", "num_classes": 2, "image_size": 8, "base_channels": 2,
                          "num_up_layers": 1, "noise_dim": 2, "spectral_norm": False, "spade_hidden": 4})
    assert _parametrised(plain) == set()


def test_the_generator_trains_a_step_and_a_bad_node_is_one_config_error():
    g = _small_generator(noise_dim=2).train()
    labels = one_hot_labels(torch.randint(0, 3, (2, 16, 16)), 3)
    g(labels, torch.randn(2, 2)).mean().backward()
    assert all(p.grad is not None for p in g.parameters())
    with pytest.raises(ConfigError, match=r"model \(SPADEGenerator\): image_size 30x30 does not fit num_up_layers 2"):
        MODELS.build({"type": "SPADEGenerator", "num_classes": 2, "image_size": 30, "num_up_layers": 2}, path="model")


def _leaky(x):
    return torch.where(x > 0, x, 0.2 * x)  # SPADE's slope, written out


def test_residual_block_and_generator_forward_by_hand():
    torch.manual_seed(0)
    block = SPADEResBlock(4, 2, label_channels=3, hidden=4).eval()
    x, labels = torch.randn(2, 4, 4, 4), one_hot_labels(torch.randint(0, 3, (2, 4, 4)), 3)
    shortcut = block.conv_s(block.norm_s(x, labels))
    dx = block.conv_1(_leaky(block.norm_1(block.conv_0(_leaky(block.norm_0(x, labels))), labels)))
    torch.testing.assert_close(block(x, labels), shortcut + dx)
    same_width = SPADEResBlock(2, 2, label_channels=3, hidden=4).eval()
    y = torch.randn(2, 2, 4, 4)
    dy = same_width.conv_1(_leaky(same_width.norm_1(same_width.conv_0(_leaky(same_width.norm_0(y, labels))), labels)))
    torch.testing.assert_close(same_width(y, labels), y + dy)  # the identity shortcut

    g = _small_generator(noise_dim=2)
    labels, noise = one_hot_labels(torch.randint(0, 3, (2, 16, 16)), 3), torch.randn(2, 2)
    condition = torch.cat([labels, noise[:, :, None, None].expand(-1, -1, 16, 16)], dim=1)
    h = g.first(condition[:, :, ::4, ::4])  # nearest to the 4x4 start
    for i, step in enumerate(g.blocks):
        h = step(h, condition)
        if i < len(g.blocks) - 1:
            h = h.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)
    torch.testing.assert_close(g(labels, noise), torch.tanh(g.to_image(_leaky(h))))


def test_the_middle_width_of_a_block_is_the_smaller_of_its_two_widths():
    """SPADE's fmiddle = min(fin, fout): parameters counted by hand (conv k x k: in x out x k x k +
    out biases; a SPADE of `channels` on 3 label channels, hidden 4: shared 3x4x9+4 = 112, gamma and
    beta 4 x channels x 9 + channels each)."""
    def spade(channels):
        return 112 + 2 * (4 * channels * 9 + channels)

    # 4 -> 2, middle 2: conv_0 4x2x9+2, conv_1 2x2x9+2, SPADEs of 4 (x) and 2 (middle), shortcut 4x2 + its SPADE
    narrowing = (4 * 2 * 9 + 2) + (2 * 2 * 9 + 2) + spade(4) + spade(2) + 4 * 2 + spade(4)
    # 2 -> 4, middle 2: conv_0 2x2x9+2, conv_1 2x4x9+4, SPADEs of 2 and 2, shortcut 2x4 + its SPADE
    widening = (2 * 2 * 9 + 2) + (2 * 4 * 9 + 4) + spade(2) + spade(2) + 2 * 4 + spade(2)
    assert (narrowing, widening) == (1196, 902)
    for (fin, fout), expected in (((4, 2), narrowing), ((2, 4), widening)):
        block = SPADEResBlock(fin, fout, label_channels=3, hidden=4)
        assert block.conv_0.out_channels == 2 and sum(p.numel() for p in block.parameters()) == expected


def test_norms_are_parameter_free_of_the_kind_asked_everywhere_and_the_shortcut_has_no_bias():
    for kind, norm_type in (("batch", nn.BatchNorm2d), ("instance", nn.InstanceNorm2d)):
        g = SPADEGenerator(num_classes=2, image_size=8, base_channels=2, num_up_layers=1, noise_dim=0,
                           spectral_norm=False, spade_hidden=4, param_free_norm=kind)
        norms = [m.norm for m in g.modules() if isinstance(m, SPADE)]
        assert len(norms) == 5  # two per block, one more for the learned shortcut
        assert all(type(n) is norm_type and not list(n.parameters()) for n in norms)
    assert g.blocks[1].conv_s.bias is None
    wide = SPADE(channels=2, label_channels=3, hidden=4, kernel_size=5)
    assert wide(torch.randn(1, 2, 6, 6), torch.ones(1, 3, 6, 6)).shape == (1, 2, 6, 6)  # padding keeps the size


def test_the_defaults_are_oasis_like_and_the_counts_are_bounded():
    parameters = inspect.signature(SPADEGenerator).parameters
    assert {k: parameters[k].default for k in ("contain_dontcare_label", "image_size", "base_channels",
                                               "num_up_layers", "noise_dim", "spectral_norm", "out_channels",
                                               "spade_hidden", "param_free_norm")} == {
        "contain_dontcare_label": False, "image_size": 256, "base_channels": 64, "num_up_layers": None,
        "noise_dim": 64, "spectral_norm": True, "out_channels": 3, "spade_hidden": 128, "param_free_norm": "batch"}
    assert SPADEGenerator(num_classes=2, base_channels=1, spade_hidden=1).num_up_layers == 5  # None: OASIS's 5
    assert inspect.signature(SPADEResBlock).parameters["hidden"].default == 128
    one_class = SPADEGenerator(num_classes=1, image_size=4, base_channels=2, num_up_layers=0, noise_dim=0,
                               spectral_norm=False, spade_hidden=4)  # depth 0: one block at the image size
    assert one_class(torch.ones(1, 1, 4, 4)).shape == (1, 3, 4, 4) and len(one_class.blocks) == 1
    with pytest.raises(ValueError, match=r"^num_classes must be >= 1, got 0$"):
        SPADEGenerator(num_classes=0, image_size=8, num_up_layers=1)
    with pytest.raises(ValueError, match=r"^noise_dim must be >= 0 \(0: no noise\), got -1$"):
        SPADEGenerator(num_classes=2, image_size=8, num_up_layers=1, noise_dim=-1)
    with pytest.raises(ValueError, match="image_size 0x8 does not fit num_up_layers 3"):
        SPADEGenerator(num_classes=2, image_size=(0, 8), num_up_layers=3)
    with pytest.raises(ValueError, match="image_size 8x8 does not fit num_up_layers -1"):
        SPADEGenerator(num_classes=2, image_size=8, num_up_layers=-1)


def test_messages_name_what_was_given():
    g = _small_generator(noise_dim=4)
    labels = one_hot_labels(torch.zeros(2, 16, 16, dtype=torch.long), 3)
    with pytest.raises(ValueError, match=re.escape("noise must be N x noise_dim = 2 x 4, got (2, 5)")):
        g(labels, torch.randn(2, 5))
    with pytest.raises(ValueError, match=re.escape("(num_classes 3, contain_dontcare_label False), got shape (2, 4, 16, 16)")):
        g(torch.zeros(2, 4, 16, 16), torch.randn(2, 4))
    with pytest.raises(ValueError, match="^this generator has noise_dim 0 and takes no noise; pass noise=None$"):
        _small_generator(noise_dim=0)(labels, torch.randn(2, 4))
    with pytest.raises(ValueError, match=re.escape("labels must be N x H x W class ids, got shape (2, 1, 16, 16)")):
        one_hot_labels(torch.zeros(2, 1, 16, 16, dtype=torch.long), 3)
    with pytest.raises(ValueError, match=re.escape("param_free_norm: unknown 'group'; choose one of batch, instance")):
        SPADE(2, 3, param_free_norm="group")


def test_resize_labels_keeps_ids_and_their_dtype():
    labels = torch.tensor([[[0, 1], [2, 255]]])
    assert resize_labels(labels, (2, 2)) is labels
    bigger = resize_labels(labels, (4, 4))
    assert bigger.dtype == torch.int64 and bigger.tolist() == [[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 255, 255],
                                                                [2, 2, 255, 255]]]
    assert resize_labels(bigger, torch.Size([2, 2])).tolist() == labels.tolist()
    assert resize_labels(labels.to(torch.uint8), (4, 4)).dtype == torch.uint8


@pytest.mark.parametrize("shape, size", [((2, 151, 64, 64), (8, 8)), ((1, 4, 64, 96), (16, 24)),
                                         ((1, 4, 64, 96), (64, 96)), ((1, 4, 96, 64), (32, 24)),
                                         ((1, 3, 64, 64), (7, 5)), ((1, 3, 30, 30), (60, 60))])
def test_the_label_resize_picks_the_pixels_nearest_interpolation_picks(shape, size):
    # the strided view where the sizes divide (SPADE's every case), interpolate otherwise
    labels = torch.randn(shape)
    assert torch.equal(resize_one_hot(labels, size), F.interpolate(labels, size=size, mode="nearest"))

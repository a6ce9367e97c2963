import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import resnet50

from framework.errors import ConfigError
from framework.models import FCN, DeepLabV3, UNet, build_norm
from framework.registry import MODELS


@pytest.mark.parametrize(
    "norm, expected",
    [("bn", nn.BatchNorm2d), ("gn", nn.GroupNorm), ("in", nn.InstanceNorm2d), ("none", nn.Identity)],
)
def test_build_norm_types(norm, expected):
    assert isinstance(build_norm(norm, 64), expected)


@pytest.mark.parametrize("channels, groups", [(64, 32), (16, 16), (48, 24), (3, 3)])
def test_group_norm_groups_divide_channels(channels, groups):
    assert build_norm("gn", channels).num_groups == groups


def test_instance_norm_is_affine_only_when_asked():
    # "in" is the official pix2pix's InstanceNorm2d(affine=False): no learned scale or shift
    assert build_norm("in", 8).weight is None and not build_norm("in", 8).affine
    affine = build_norm("in_affine", 8)
    assert affine.affine and affine.weight.shape == (8,) and affine.bias.shape == (8,)


def test_build_norm_rejects_unknown_name():
    with pytest.raises(ValueError, match=r"'batch'.*'bn', 'gn', 'in', 'in_affine', 'none'"):
        build_norm("batch", 8)


@pytest.mark.parametrize("norm", ["bn", "gn", "in", "none"])
@pytest.mark.parametrize("upsample", ["bilinear", "transpose"])
def test_unet_output_shape(norm, upsample):
    model = UNet(in_channels=1, num_classes=5, base_channels=8, depth=3, norm=norm, upsample=upsample)
    assert model(torch.randn(2, 1, 32, 48)).shape == (2, 5, 32, 48)


def test_unet_conv_bias_only_without_norm():
    def hidden_convs(model):  # every conv but the 1x1 head and the bilinear branch's 1x1 mixer
        return [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]

    assert all(conv.bias is None for conv in hidden_convs(UNet(norm="bn", depth=2)))
    assert all(conv.bias is not None for conv in hidden_convs(UNet(norm="none", depth=2)))


def test_unet_rejects_size_not_divisible_by_two_to_the_depth():
    model = UNet(base_channels=4, depth=3)
    with pytest.raises(ValueError, match=r"depth=3.*8.*got 36x64"):
        model(torch.randn(1, 3, 36, 64))


def test_unet_learns_a_batch():
    torch.manual_seed(0)
    model = UNet(num_classes=2, base_channels=4, depth=2)
    images, masks = torch.randn(2, 3, 8, 8), torch.randint(0, 2, (2, 8, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), masks)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_registry_builds_unet_from_node():
    model = MODELS.build({"type": "UNet", "num_classes": 3, "depth": 2, "base_channels": 4})
    assert isinstance(model, UNet)
    assert model(torch.randn(1, 3, 8, 8)).shape == (1, 3, 8, 8)


def test_registry_names_a_bad_keyword():
    with pytest.raises(ConfigError, match=r"model\.num_class\b.*did you mean 'num_classes'"):
        MODELS.build({"type": "UNet", "num_class": 3}, path="model")


def test_registry_reports_bad_unet_values():
    with pytest.raises(ConfigError, match=r"'batch'"):
        MODELS.build({"type": "UNet", "norm": "batch"})
    with pytest.raises(ConfigError, match=r"'nearest'.*'bilinear', 'transpose'"):
        MODELS.build({"type": "UNet", "upsample": "nearest"})


@pytest.fixture(scope="module")
def deeplab():
    return DeepLabV3(num_classes=3, backbone="resnet50").eval()


@pytest.fixture(scope="module")
def fcn():
    return FCN(num_classes=4, backbone="resnet50").eval()


@torch.no_grad()
def test_deeplab_returns_logits_at_input_size(deeplab):
    assert deeplab(torch.randn(2, 3, 64, 64)).shape == (2, 3, 64, 64)


@torch.no_grad()
def test_fcn_returns_logits_at_input_size(fcn):
    assert fcn(torch.randn(2, 3, 64, 64)).shape == (2, 4, 64, 64)


def test_torchvision_backbone_accepts_a_resnet50_state_dict(deeplab):
    reference = resnet50(weights=None).state_dict()
    missing, unexpected = deeplab.net.backbone.load_state_dict(reference, strict=False)
    assert missing == []
    assert sorted(unexpected) == ["fc.bias", "fc.weight"]
    assert torch.equal(deeplab.net.backbone.layer4[0].conv2.weight, reference["layer4.0.conv2.weight"])


@torch.no_grad()
def test_deeplab_mobilenet_backbone():
    model = MODELS.build({"type": "DeepLabV3", "num_classes": 2, "backbone": "mobilenet_v3_large"}).eval()
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 2, 64, 64)


@pytest.mark.parametrize("model_type, choices", [("DeepLabV3", "'resnet50', 'resnet101', 'mobilenet_v3_large'"),
                                                 ("FCN", "'resnet50', 'resnet101'")])
def test_unknown_backbone_lists_choices(model_type, choices):
    with pytest.raises(ConfigError, match=f"'vgg16'; choose one of {choices}"):
        MODELS.build({"type": model_type, "num_classes": 2, "backbone": "vgg16"})

"""VGGPerceptualLoss: torchvision-layout weights from the hub cache or a file (never a
download), a one-line error for a missing file, float32 under autocast, kept out of
checkpoints, optimizers and training mode."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.vgg import cfgs, make_layers

import framework  # noqa: F401
from framework.errors import ConfigError, UserError
from framework.registry import LOSSES, TASKS

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A torch hub cache holding a (randomly initialised) vgg16 file in torchvision's layout."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    torch.manual_seed(0)
    features = make_layers(cfgs["D"])
    state = {f"features.{k}": v for k, v in features.state_dict().items()}
    state["classifier.0.weight"] = torch.zeros(2, 2)  # the file has more than the features
    folder = tmp_path / "hub" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save(state, folder / "vgg16-397923af.pth")
    return features.eval()


def hand_loss(features, fake, real, layers):
    """weight 1 x sum of layer weight x L1 between torchvision's VGG features."""
    def run(images):
        x, out = ((images + 1) / 2 - MEAN) / STD, {}
        for index, layer in enumerate(features):
            x = layer(x)
            out[index] = x.clone()
        return out

    fake_features, real_features = run(fake), run(real)
    return sum(w * F.l1_loss(fake_features[i], real_features[i]) for i, w in layers.items())


def test_loss_equals_the_hand_computation_with_weights_from_the_hub_cache(hub_cache):
    loss = LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weight": 2.0,
                         "layers": {"relu1_2": 0.5, "relu3_3": 1.0}})
    torch.manual_seed(1)
    fake, real = torch.rand(2, 3, 32, 32) * 2 - 1, torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        expected = 2.0 * hand_loss(hub_cache, fake, real, {3: 0.5, 15: 1.0})
        torch.testing.assert_close(loss(fake, real), expected)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # evaluated in float32 all the same
            under_amp = loss(fake, real)
    assert under_amp.dtype == torch.float32
    torch.testing.assert_close(under_amp, expected)
    assert len(loss.vgg) == 16  # built only up to relu3_3


def test_a_missing_weights_file_is_one_line_naming_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as error:
        LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg19"}, path="task.perceptual")
    message = str(error.value)
    assert "\n" not in message
    assert message == (f"task.perceptual (VGGPerceptualLoss): weights: vgg19 weights file vgg19-dcbb9e9d.pth not found in "
                       f"{tmp_path / 'hub' / 'checkpoints'} (torchvision's ImageNet file from the torch hub cache; "
                       "nothing is downloaded: place the file there, set weights to its path, or weights: random for a demo)")
    with pytest.raises(ConfigError, match=re.escape(f"vgg16-397923af.pth not found in {tmp_path} (the file given; nothing")):
        LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": str(tmp_path / "vgg16-397923af.pth")})


@pytest.mark.parametrize("content, message", [
    ("random_bytes", "cannot load {path}: not a PyTorch checkpoint, or a corrupt or truncated one"),
    ("whole_model", "refused to load {path}: it holds pickled objects (torch.nn.modules.container.Sequential, "),
], ids=["random_bytes", "whole_model"])
def test_a_damaged_or_pickled_object_weights_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "vgg16.pth"
    if content == "random_bytes":
        path.write_bytes(bytes(range(256)) * 8)
    else:
        torch.save(make_layers(cfgs["D"])[:4], path)  # torch.save(model): its classes would be unpickled
    with pytest.raises(UserError) as error:
        LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": str(path)}, path="task.perceptual")
    assert str(error.value).startswith("task.perceptual (VGGPerceptualLoss): " + message.format(path=path))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_a_nan_in_a_weights_file_is_named_when_it_is_loaded(tmp_path, suffix):
    """nothing-silent part 4, item 8: it trained an iteration and was reported as a diverged run."""
    torch.manual_seed(0)
    features = make_layers(cfgs["D"])
    state = {f"features.{k}": v.contiguous() for k, v in features.state_dict().items()}
    state["features.5.weight"][0, 0, 1, 1] = float("nan")
    path = tmp_path / f"vgg16{suffix}"
    if suffix == ".pth":
        torch.save(state, path)
    else:
        from safetensors.torch import save_file
        save_file(state, str(path))
    with pytest.raises(UserError) as error:
        LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": str(path)}, path="task.perceptual")
    assert str(error.value) == (f"task.perceptual (VGGPerceptualLoss): {path}: the weights are not finite (NaN or inf "
                                "in features.5.weight, 1 of 73728 values): the file is damaged or the training that "
                                "produced it diverged; use another copy")


def test_a_file_of_another_network_is_refused(tmp_path):
    torch.save({"features.0.weight": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(ConfigError, match=re.escape("is not a torchvision vgg16 file: 22 tensors missing or of "
                                                    "another shape, e.g. features.0.weight")):
        LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": str(tmp_path / "other.pth")})


def test_the_vgg_is_in_no_checkpoint_optimizer_or_training_mode(hub_cache):
    task = TASKS.build({"type": "GANTask", "generator": nn.Conv2d(3, 3, 1), "discriminator": nn.Conv2d(6, 1, 1),
                        "perceptual": {"type": "VGGPerceptualLoss", "arch": "vgg16", "layers": {"relu2_2": 1.0}}})
    task.train()
    assert not task.perceptual.vgg.training
    assert not any("vgg" in key or key.startswith("perceptual.") for key in task.state_dict())
    assert set(task.networks()) == {"generator", "discriminator"}
    assert not any(p.requires_grad for p in task.perceptual.vgg.parameters())
    task.to(torch.float64)  # the VGG follows the task's moves
    assert next(task.perceptual.vgg.parameters()).dtype == torch.float64


def test_random_weights_only_when_asked_and_unknown_layers_named():
    LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random", "layers": {"relu1_1": 1.0}})
    with pytest.raises(ConfigError, match="layers: vgg16 has no layer 'relu3_4'; did you mean"):
        LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random", "layers": {"relu3_4": 1.0}})


def test_the_defaults_are_pix2pixhds_vgg19_layers_and_weight_10():
    loss = LOSSES.build({"type": "VGGPerceptualLoss", "weights": "random"})
    assert len(loss.vgg) == 30  # vgg19 up to relu5_1
    assert loss.layers == {1: 1 / 32, 6: 1 / 16, 11: 1 / 8, 20: 1 / 4, 29: 1.0} and loss.weight == 10.0


@pytest.mark.parametrize("node, message", [
    ({"arch": "vgg18"}, "arch: unknown 'vgg18'; did you mean 'vgg19', 'vgg16'? (vgg16 or vgg19)"),
    ({"layers": {}}, "layers: name at least one VGG layer, e.g. {relu3_1: 1.0}"),
    ({"layers": {"relu1_1": -0.5}}, "layers.relu1_1: expected a weight >= 0, got -0.5"),
    ({"layers": {"relu1_1": "high"}}, "layers.relu1_1: expected a weight >= 0, got 'high'"),
    ({"weight": 0}, "weight must be positive, got 0"),
], ids=["arch", "no_layers", "negative_layer_weight", "text_layer_weight", "zero_weight"])
def test_bad_settings_are_one_line_naming_the_key(node, message):
    with pytest.raises(ConfigError) as error:
        LOSSES.build({"type": "VGGPerceptualLoss", "weights": "random", **node}, path="task.perceptual")
    assert str(error.value) == f"task.perceptual (VGGPerceptualLoss): {message}"


def test_a_zero_layer_weight_and_a_weight_below_one_are_allowed():
    loss = LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random", "weight": 0.5,
                         "layers": {"relu1_1": 0.0, "relu1_2": 1.0}})
    assert loss.weight == 0.5 and loss.layers == {1: 0.0, 3: 1.0}


def test_images_of_other_than_three_channels_are_refused_naming_the_count():
    loss = LOSSES.build({"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random", "layers": {"relu1_1": 1.0}})
    with pytest.raises(ValueError, match=re.escape("the VGG perceptual loss needs 3-channel images, got 1 channels")):
        loss(torch.zeros(2, 1, 8, 8), torch.zeros(2, 1, 8, 8))

"""Encoders x decoders, encoder_weights through the partial-loading path, stem adaptation."""

import json

import pytest
import torch
import torchvision
from safetensors.torch import save_file
from torch import nn

from framework.engine.pretrained import load_pretrained
from framework.errors import CheckpointError
from framework.models.decoders import FPN, DeepLabV3Plus, EncoderUNet
from framework.models.encoders import ENCODERS, build_encoder
from framework.models.encoders.stem import adapt_input_channels
from framework.registry import MODELS, TASKS

DECODERS = (EncoderUNet, FPN, DeepLabV3Plus)
SIZES = ((64, 64), (45, 70))  # the second is not a multiple of 32: padded inside, cropped back


@pytest.mark.parametrize("name", ENCODERS.names())
def test_every_decoder_on_every_encoder_returns_logits_at_the_input_size(name):
    encoder = build_encoder(name)  # built once, shared by the three decoders (the slow part)
    for decoder in DECODERS:
        model = decoder(encoder=encoder, num_classes=3).eval()
        for height, width in SIZES:
            with torch.no_grad():
                assert model(torch.randn(1, 3, height, width)).shape == (1, 3, height, width), decoder.__name__


@pytest.mark.parametrize("output_stride", [8, 16])
def test_deeplabv3plus_on_a_dilated_resnet(output_stride):
    model = MODELS.build({"type": "DeepLabV3Plus", "encoder": "resnet18", "num_classes": 2, "in_channels": 4,
                          "output_stride": output_stride}, path="task.model").eval()
    assert model.encoder.strides[-1] == output_stride
    with torch.no_grad():
        assert model(torch.randn(1, 4, 45, 70)).shape == (1, 2, 45, 70)


def segmentation_task(model: nn.Module) -> nn.Module:
    return TASKS.build({"type": "SegmentationTask", "num_classes": 3, "loss": {"type": "CrossEntropyLoss"},
                        "model": model}, path="task")


def torchvision_resnet18_file(path, prefix="", seed=0):
    """Random weights in torchvision's layout (what torchvision.models.resnet18 saves)."""
    torch.manual_seed(seed)
    weights = {prefix + k: v for k, v in torchvision.models.resnet18().state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(weights, path) if path.suffix == ".safetensors" else torch.save(weights, path)
    return weights


@pytest.mark.parametrize("file_name, prefix", [("resnet18.pth", ""), ("resnet18.safetensors", "backbone."),
                                               ("deeplab.pth", "module.model.encoder.")])
def test_torchvision_layout_file_loads_as_encoder_weights(tmp_path, file_name, prefix):
    weights = torchvision_resnet18_file(tmp_path / file_name, prefix)
    model = MODELS.build({"type": "EncoderUNet", "encoder": "resnet18", "num_classes": 3,
                          "encoder_weights": str(tmp_path / file_name)}, path="task.model")
    head_before = model.head.weight.clone()
    load_pretrained(segmentation_task(model), None, str(tmp_path))

    report = json.loads((tmp_path / "load_report.json").read_text())["task.model (encoder_weights)"]
    own = model.state_dict()
    encoder_keys = [k for k in own if k.startswith("encoder.")]
    assert [e["key"] for e in report["loaded"]] == encoder_keys  # 100% of the encoder
    assert [e["key"] for e in report["missing"]] == [k for k in own if not k.startswith("encoder.")]  # new
    assert {e["source"] for e in report["unexpected"]} == {prefix + "fc.weight", prefix + "fc.bias"}
    assert report["counts"]["loaded"] == len(weights) - 2 and report["counts"]["shape_mismatched"] == 0
    assert torch.equal(model.encoder.body.get_submodule("layer4.1.conv2").weight, weights[prefix + "layer4.1.conv2.weight"])
    assert torch.equal(model.encoder.body.bn1.running_var, weights[prefix + "bn1.running_var"])
    assert torch.equal(model.head.weight, head_before)


def test_torchvision_weights_come_from_the_local_hub_cache_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    folder = tmp_path / "torch" / "hub" / "checkpoints"
    task = segmentation_task(EncoderUNet("resnet18", num_classes=3, encoder_weights="torchvision"))
    with pytest.raises(CheckpointError) as err:
        load_pretrained(task, None, str(tmp_path))
    message = str(err.value)
    assert "\n" not in message and f"resnet18-f37072fd.pth in {folder}" in message
    assert not (tmp_path / "load_report.json").exists()

    weights = torchvision_resnet18_file(folder / "resnet18-f37072fd.pth")
    (report,) = load_pretrained(task, None, str(tmp_path))
    assert report.spec.checkpoint == str(folder / "resnet18-f37072fd.pth")
    assert torch.equal(task.model.encoder.body.conv1.weight, weights["conv1.weight"])


def test_a_file_for_another_encoder_is_refused_naming_it(tmp_path):
    torch.save({"features.0.weight": torch.zeros(3)}, tmp_path / "other.pth")
    task = segmentation_task(EncoderUNet("resnet18", num_classes=3, encoder_weights=str(tmp_path / "other.pth")))
    with pytest.raises(CheckpointError, match=r"task.model.encoder_weights: no tensor name of the file ends with"):
        load_pretrained(task, None, str(tmp_path))


def started_from_rgb_weights(path, in_channels, reference=None):
    """A float64 EncoderUNet-resnet18 with `in_channels` loaded from the 3-channel file; the
    decoder and head copied from `reference` so only the encoder's stem differs."""
    model = EncoderUNet("resnet18", num_classes=3, in_channels=in_channels, encoder_weights=str(path),
                        decoder_channels=(32, 16, 16, 8, 8))
    (report,) = load_pretrained(segmentation_task(model), None, None)
    if reference is not None:
        model.load_state_dict({k: v for k, v in reference.state_dict().items() if not k.startswith("encoder.")},
                              strict=False)
    return model.double().eval(), report


def test_1_and_4_channel_models_start_as_the_rgb_one(tmp_path):
    # float64: the adapted convolutions sum the same products in another order, which in
    # float32 differs by rounding (~1e-6 relative) depending on the CPU's kernels.
    path = tmp_path / "resnet18.pth"
    weights = torchvision_resnet18_file(path)
    rgb, rgb_report = started_from_rgb_weights(path, 3)
    four, four_report = started_from_rgb_weights(path, 4, rgb)
    grey, grey_report = started_from_rgb_weights(path, 1, rgb)
    assert rgb_report.counts().get("adapted", 0) == 0
    for report, channels in ((four_report, 4), (grey_report, 1)):
        (stem,) = [e for e in report.loaded if e.get("adapted")]
        assert stem == {"key": "encoder.body.conv1.weight", "source": "conv1.weight", "adapted": "zeros",
                        "checkpoint_shape": [64, 3, 7, 7], "model_shape": [64, channels, 7, 7]}
        assert report.counts()["adapted"] == 1 and not report.shape_mismatched
    assert torch.equal(four.encoder.body.conv1.weight[:, :3].float(), weights["conv1.weight"])

    image = torch.randn(2, 3, 45, 70, dtype=torch.float64)
    with torch.no_grad():
        expected = rgb(image)
        assert expected.abs().max() > 0
        torch.testing.assert_close(four(torch.cat([image, torch.zeros_like(image[:, :1])], dim=1)), expected)
        torch.testing.assert_close(four(torch.cat([image, torch.ones_like(image[:, :1])], dim=1)), expected)
        plain = image[:, :1]
        torch.testing.assert_close(grey(plain), rgb(plain.repeat(1, 3, 1, 1)))


def test_any_network_init_adapts_its_stem_when_asked(tmp_path):
    torch.manual_seed(0)
    rgb = MODELS.build({"type": "UNet", "num_classes": 3, "base_channels": 8, "depth": 2}, path="task.model")
    torch.save(rgb.state_dict(), tmp_path / "unet_rgb.pth")
    init = {"checkpoint": str(tmp_path / "unet_rgb.pth"), "adapt_in_channels": "zeros"}
    four = MODELS.build({"type": "UNet", "num_classes": 3, "base_channels": 8, "depth": 2, "in_channels": 4,
                         "init": init}, path="task.model")
    (report,) = load_pretrained(segmentation_task(four), None, str(tmp_path))
    assert report.loaded_ratio == 1.0 and [e["key"] for e in report.loaded if e.get("adapted")] == ["stem.0.0.weight"]
    saved = json.loads((tmp_path / "load_report.json").read_text())["task.model"]
    assert saved["counts"]["adapted"] == 1 and saved["counts"]["shape_mismatched"] == 0
    image = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(four.double().eval()(torch.cat([image, 0 * image[:, :1]], 1)),
                                   rgb.double().eval()(image))

    without = MODELS.build({"type": "UNet", "num_classes": 3, "base_channels": 8, "depth": 2, "in_channels": 4,
                            "init": str(tmp_path / "unet_rgb.pth")}, path="task.model")
    (report,) = load_pretrained(segmentation_task(without), None, None)
    assert [e["key"] for e in report.shape_mismatched] == ["stem.0.0.weight"]  # not asked: skipped as before


@pytest.mark.parametrize("in_channels", [1, 6, 9])
def test_mean_adaptation_keeps_the_output_for_repeated_channels(in_channels):
    """timm's rule: with every channel carrying the same image, the output is the RGB one's
    (exactly so when the channels are a whole number of RGB copies)."""
    weight = torch.randn(8, 3, 3, 3, dtype=torch.float64)
    image = torch.randn(1, 1, 9, 9, dtype=torch.float64)
    adapted = adapt_input_channels(weight, in_channels, "mean")
    torch.testing.assert_close(nn.functional.conv2d(image.repeat(1, in_channels, 1, 1), adapted),
                               nn.functional.conv2d(image.repeat(1, 3, 1, 1), weight))


def test_adaptation_rules_for_uneven_channel_counts():
    weight = torch.randn(8, 3, 3, 3)
    torch.testing.assert_close(adapt_input_channels(weight, 5, "mean"), torch.cat([weight, weight[:, :2]], 1) * 0.6)
    zeros = adapt_input_channels(weight, 2, "zeros")
    assert torch.equal(zeros[:, :1], weight.sum(1, keepdim=True)) and not zeros[:, 1].any()
    with pytest.raises(ValueError, match="unknown channel adaptation 'median'"):
        adapt_input_channels(weight, 4, "median")

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
from support import REPO, call_tool

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


@pytest.mark.parametrize("decoder", ["EncoderUNet", "FPN", "DeepLabV3Plus"])
def test_encoder_depth_drops_the_deepest_stages(tmp_path, decoder):
    weights = torchvision_resnet18_file(tmp_path / "resnet18.pth")
    model = MODELS.build({"type": decoder, "encoder": "resnet18", "num_classes": 3, "encoder_depth": 4,
                          "encoder_weights": str(tmp_path / "resnet18.pth")}, path="task.model")
    assert model.encoder.strides == [2, 4, 8, 16] and model.encoder.channels == [64, 64, 128, 256]
    assert not [k for k in model.state_dict() if "layer4" in k]  # not built, not only unused
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 45, 70)).shape == (1, 3, 45, 70)

    load_pretrained(segmentation_task(model), None, str(tmp_path))
    report = json.loads((tmp_path / "load_report.json").read_text())["task.model (encoder_weights)"]
    assert [e["key"] for e in report["loaded"]] == [k for k in model.state_dict() if k.startswith("encoder.")]
    assert {e["source"] for e in report["unexpected"]} == {k for k in weights if k.startswith(("layer4.", "fc."))}


def test_encoder_depth_mistakes_are_config_errors_at_the_node():
    for depth in (0, 6, 2.5):
        with pytest.raises(ValueError, match=rf"encoder_depth must be an integer from 1 to 5 for resnet18, got {depth}"):
            EncoderUNet("resnet18", num_classes=3, encoder_depth=depth)

    @ENCODERS.register()
    def fixed_depth_net(in_channels=3, output_stride=32):
        return build_encoder("resnet18", in_channels, output_stride)

    try:
        with pytest.raises(ValueError, match=r"encoder_depth: the encoder 'fixed_depth_net' returns all its maps"):
            EncoderUNet("fixed_depth_net", num_classes=3, encoder_depth=3)
        with pytest.raises(ValueError, match=r"encoder_depth applies to an encoder built from its name"):
            EncoderUNet(build_encoder("fixed_depth_net"), num_classes=3, encoder_depth=3)
    finally:
        ENCODERS._entries.pop("fixed_depth_net")


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


# ----------------------------------------------------------------------------- training runs

ENCODER_UNET = REPO / "configs" / "segmentation" / "encoder_unet_resnet34_shapes.yaml"
TINY_RUN = ["device=cpu", "data.train.dataset.size=32", "data.train.dataset.num_samples=8", "data.train.batch_size=2",
            "data.train.num_workers=0", "data.val.dataset.size=32", "data.val.dataset.num_samples=2",
            "data.val.batch_size=2", "train.val_interval=0", "train.log_interval=1"]


def test_a_missing_torchvision_file_stops_the_run_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    result = call_tool("train", "--config", ENCODER_UNET, "--work-dir", tmp_path / "run", *TINY_RUN)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: task.model.encoder_weights: torchvision weights ResNet34_Weights.IMAGENET1K_V1 need the file "
        f"resnet34-b627a593.pth in {tmp_path / 'torch' / 'hub' / 'checkpoints'} (nothing is downloaded at run "
        "time; fetch https://download.pytorch.org/models/resnet34-b627a593.pth there, or set TORCH_HOME)")


def test_encoder_trains_at_a_tenth_of_the_lr_after_a_frozen_start(tmp_path):
    weights = torchvision_resnet18_file(tmp_path / "resnet18.pth")
    result = call_tool("train", "--config", ENCODER_UNET, "--work-dir", tmp_path / "run", *TINY_RUN,
                       "task.model.encoder=resnet18", f"task.model.encoder_weights={tmp_path / 'resnet18.pth'}",
                       "+task.model.decoder_channels=[16, 16, 8, 8, 8]", "train.max_iters=3",
                       "train.ckpt_interval=1", "train.keep_last=3", "optim.scheduler=null",
                       "hooks=[{type: FrozenStartHook, iters: 2, groups: [encoder]}]")
    assert result.returncode == 0, result.stderr
    states = [torch.load(tmp_path / "run" / "checkpoints" / f"iter_{i}.pth", weights_only=True) for i in (1, 2, 3)]
    conv1 = [s["task"]["model.encoder.body.conv1.weight"] for s in states]
    head = [s["task"]["model.head.weight"] for s in states]
    assert torch.equal(conv1[0], weights["conv1.weight"]) and torch.equal(conv1[1], weights["conv1.weight"])
    assert not torch.equal(conv1[2], weights["conv1.weight"])  # unfrozen at the third iteration
    assert not torch.equal(head[0], head[1]) and not torch.equal(head[1], head[2])  # the head trained all along
    for state in states:  # the learning rates saved are the true ones, 0.1x for the encoder
        groups = {g["name"]: g["lr"] for g in state["optim"]["optimizers"]["main"]["param_groups"]}
        assert groups == {"default": 1.0e-3, "encoder": pytest.approx(1.0e-4)}


def test_param_group_mistakes_name_the_key():
    from framework.errors import ConfigError
    from framework.optim.optimizers import build_optimizers

    task = segmentation_task(EncoderUNet("resnet18", num_classes=3, decoder_channels=(8, 8, 8, 8, 8)))
    optim = {"type": "SGD", "lr": 0.1, "param_groups": [{"params": "model.encoder", "lr_mul": 0.1}]}
    with pytest.raises(ConfigError, match=r"optim.param_groups\[0\].lr_mul: unknown key; did you mean 'lr_mult'"):
        build_optimizers({"optim": optim}, task, max_iters=1)
    optim["param_groups"] = [{"params": "model.encoder"}, {"params": "model.encoder.body"}]
    with pytest.raises(ConfigError, match=r"param_groups\[1\].params: parameters of 'model.encoder.body' are already"):
        build_optimizers({"optim": optim}, task, max_iters=1)
    optim["param_groups"] = [{"params": "model.encodr"}]
    with pytest.raises(ConfigError, match=r"param_groups\[0\].params: the task has no submodule 'model.encodr'"):
        build_optimizers({"optim": optim}, task, max_iters=1)


def test_encoder_weights_of_another_model_are_an_error_naming_the_mismatches(tmp_path):
    # resnet50's file has resnet18's names for 97 of its 120 tensors; 23 differ in shape
    torch.save(torchvision.models.resnet50().state_dict(), tmp_path / "resnet50.pth")
    model = MODELS.build({"type": "EncoderUNet", "encoder": "resnet18", "num_classes": 3,
                          "encoder_weights": str(tmp_path / "resnet50.pth")}, path="task.model")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"task.model \(encoder_weights\) <- .*resnet50.pth: 2\d tensors of "
                                              r"encoder.body have another shape in the file \(encoder.body.layer1.0"
                                              r".*are these weights of another model\?"):
        load_pretrained(segmentation_task(model), None, str(tmp_path))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing half-loaded
    assert not (tmp_path / "load_report.json").exists()

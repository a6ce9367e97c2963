"""Partial loading of pretrained weights (init per network, load_from), its report, freezing."""

import json
import logging
import re

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from framework.engine.evaluation import evaluate
from framework.engine.network_settings import configured_networks, freeze_and_keep_eval
from framework.engine.pretrained import load_pretrained
from framework.errors import CheckpointError, ConfigError
from framework.optim.optimizers import build_optimizers
from framework.registry import MODELS, TASKS
from framework.weights.partial_load import LoadSpec, load_into
from support import REPO, TINY_UNET, run_forked_tool


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Conv2d(4, 5, 1)  # 5 classes now; the file has 3
        self.extra = nn.Linear(2, 2)  # new: not in the file


def constructed_file(tmp_path, suffix):
    """Weights saved from a DDP-wrapped, compiled model with older names, plus other modules."""
    source = Net()
    weights = {
        "module.model.backbone_conv.weight": torch.randn(4, 3, 3, 3),  # renamed -> conv.weight
        "module.model.backbone_conv.bias": torch.randn(4),
        **{f"module.model._orig_mod.bn.{k}": v + 1 for k, v in source.bn.state_dict().items()},
        "module.model.head.weight": torch.randn(3, 4, 1, 1),  # reshaped: skipped
        "module.model.head.bias": torch.randn(3),
        "module.model.aux.weight": torch.randn(7),  # unexpected
        "module.ema.conv.weight": torch.randn(4, 3, 3, 3),  # outside the prefix
    }
    path = tmp_path / f"weights{suffix}"
    save_file(weights, path) if suffix == ".safetensors" else torch.save({"state_dict": weights}, path)
    return path, weights


SPEC = {"prefix": "model.", "rename": {r"^backbone_conv\.": "conv."}}


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_report_counts_are_exact(tmp_path, suffix):
    path, weights = constructed_file(tmp_path, suffix)
    net = Net()
    head_before = net.head.weight.clone()
    report = load_into(net, LoadSpec.from_config({"checkpoint": str(path), **SPEC}, "init"), "task.model")

    assert report.counts() == {"loaded": 7, "missing": 2, "unexpected": 1, "shape_mismatched": 2,
                               "outside_prefix": 1, "module_tensors": 11}
    assert torch.equal(net.conv.weight, weights["module.model.backbone_conv.weight"])
    assert torch.equal(net.bn.running_var, weights["module.model._orig_mod.bn.running_var"])
    assert torch.equal(net.head.weight, head_before)
    assert report.missing == [{"key": "extra.weight", "shape": [2, 2]}, {"key": "extra.bias", "shape": [2]}]
    assert report.unexpected == [{"key": "aux.weight", "source": "module.model.aux.weight", "shape": [7]}]
    assert report.shape_mismatched[0] == {"key": "head.weight", "source": "module.model.head.weight",
                                          "checkpoint_shape": [3, 4, 1, 1], "model_shape": [5, 4, 1, 1]}
    assert {"key": "conv.weight", "source": "module.model.backbone_conv.weight"} in report.loaded


def test_strict_fails_listing_every_mismatch(tmp_path):
    path, _ = constructed_file(tmp_path, ".pth")
    spec = LoadSpec.from_config({"checkpoint": str(path), **SPEC, "strict": True}, "init")
    with pytest.raises(CheckpointError) as err:
        load_into(Net(), spec, "task.model")
    message = str(err.value)
    assert "2 missing: extra.weight, extra.bias" in message
    assert "1 unexpected: module.model.aux.weight" in message
    assert "2 shape mismatch: head.weight [3, 4, 1, 1] vs [5, 4, 1, 1], head.bias [3] vs [5]" in message


def test_min_loaded_ratio_and_loading_nothing_are_errors(tmp_path):
    path, _ = constructed_file(tmp_path, ".pth")
    with pytest.raises(CheckpointError, match=r"loaded 6 of 10 tensors besides BatchNorm counters \(60%\), below min_loaded_ratio 0.9"):
        load_into(Net(), LoadSpec.from_config({"checkpoint": str(path), **SPEC, "min_loaded_ratio": 0.9}, "i"), "m")
    with pytest.raises(CheckpointError, match="no tensor matched"):
        load_into(Net(), LoadSpec.from_config({"checkpoint": str(path), "prefix": "decoder."}, "i"), "m")


def test_load_options_are_validated():
    with pytest.raises(ConfigError, match=r"task.model.init.checkpont: unknown key; did you mean 'checkpoint'"):
        LoadSpec.from_config({"checkpont": "x.pth"}, "task.model.init")
    with pytest.raises(ConfigError, match="task.model.init.rename: '\\(' is not a regular expression"):
        LoadSpec.from_config({"checkpoint": "x.pth", "rename": {"(": ""}}, "task.model.init")
    with pytest.raises(ConfigError, match="task.model.init.strict: expected true or false, got 'no'"):
        LoadSpec.from_config({"checkpoint": "x.pth", "strict": "no"}, "task.model.init")


def test_torchvision_resnet50_loads_into_the_deeplabv3_backbone(tmp_path):
    from torchvision.models import resnet50

    resnet = resnet50(weights=None).state_dict()
    path = tmp_path / "resnet50.pth"
    torch.save(resnet, path)
    model = MODELS.build({"type": "DeepLabV3", "num_classes": 5,
                          "init": {"checkpoint": str(path), "rename": {"^": "net.backbone."}}}, path="task.model")
    (report,) = load_pretrained(nn.ModuleDict({"model": model}), None, str(tmp_path))

    backbone = model.net.backbone.state_dict()
    assert len(report.loaded) == len(backbone) == len(resnet) - 2
    assert all(torch.equal(backbone[k], resnet[k]) for k in backbone)
    assert sorted(e["source"] for e in report.unexpected) == ["fc.bias", "fc.weight"]
    assert report.missing and all(e["key"].startswith("net.classifier.") for e in report.missing)
    saved = json.loads((tmp_path / "load_report.json").read_text())
    assert saved["task.model"]["counts"]["loaded"] == len(backbone)


def tiny_task(**network_settings):
    node = {"type": "SegmentationTask", "num_classes": 4, "loss": {"type": "CrossEntropyLoss"},
            "model": {"type": "UNet", "num_classes": 4, "base_channels": 8, "depth": 2, **network_settings}}
    task = TASKS.build(node, path="task")
    for _, network, settings in configured_networks(task):
        freeze_and_keep_eval(network, settings)
    return task


def test_frozen_modules_get_no_optimizer_and_norm_eval_keeps_batchnorm_fixed():
    task = tiny_task(frozen=["stem", "down.0"], norm_eval=True)
    optim = build_optimizers({"optim": {"type": "SGD", "lr": 0.1}}, task, max_iters=1)
    frozen = {id(p) for name in ("stem", "down.0") for p in task.model.get_submodule(name).parameters()}
    trained = {id(p) for p in optim.params()}
    assert frozen and not frozen & trained and len(trained) == sum(1 for p in task.parameters()) - len(frozen)

    batch = {"image": torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8),
             "mask": torch.randint(0, 4, (2, 32, 32))}
    evaluate(task, [batch], [], torch.device("cpu"))  # leaves eval mode through task.train()
    task.train()
    batchnorms = [m for m in task.model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert batchnorms and not any(m.training for m in batchnorms)
    assert task.model.head.training and task.model.training
    before = {k: v.clone() for k, v in task.model.state_dict().items()}
    task.train_step(batch, optim)
    after = task.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith(("stem.", "down.0.")) or "running" in k)
    assert not torch.equal(before["head.weight"], after["head.weight"])


def test_frozen_names_are_checked():
    with pytest.raises(ConfigError, match=r"task.model.frozen: the network has no submodule 'stemm'; did you mean 'stem'"):
        tiny_task(frozen=["stemm"])


def test_training_run_writes_load_report_and_table(tmp_path):
    donor = MODELS.build({"type": "UNet", "num_classes": 3, "base_channels": 8, "depth": 2})
    donor_file = tmp_path / "unet_3_classes.pth"
    torch.save(donor.state_dict(), donor_file)
    result = run_forked_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                             tmp_path / "run", *TINY_UNET, "train.max_iters=1", "train.val_interval=0",
                             f"+task.model.init={{checkpoint: {donor_file}, strict: false}}",
                             "+task.model.frozen=[stem]", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    report = json.loads((tmp_path / "run/load_report.json").read_text())
    counts = report["task.model"]["counts"]
    assert counts == {"loaded": 64, "missing": 0, "unexpected": 0, "shape_mismatched": 2, "outside_prefix": 0,
                      "module_tensors": 66}
    assert f"task.model <- {donor_file}" in result.stdout
    assert re.search(r"shape mismatch +2  head.weight \[3, 8, 1, 1\] vs \[4, 8, 1, 1\]", result.stdout)


def unet(**overrides):
    torch.manual_seed(0)
    return MODELS.build({"type": "UNet", "num_classes": 4, "base_channels": 8, "depth": 2, **overrides})


def as_task(model):
    return {f"model.{k}": v for k, v in model.state_dict().items()}  # a task's names, as load_from reads them


def test_load_from_of_other_widths_is_an_error_by_default_and_a_new_head_says_what_is_random(tmp_path, caplog):
    torch.save(as_task(unet(base_channels=16)), tmp_path / "wide.pth")  # only head.bias has the same shape
    with pytest.raises(CheckpointError, match=r"task <- .*wide.pth: loaded 1 of \d+ tensors besides BatchNorm "
                                              r"counters \(\d%\), below min_loaded_ratio 0.5"):
        load_pretrained(TASKS.build({"type": "SegmentationTask", "model": unet(), "num_classes": 4, "loss": {"type": "CrossEntropyLoss"}}),
                        str(tmp_path / "wide.pth"), None)
    torch.save(as_task(unet(num_classes=3)), tmp_path / "three_classes.pth")  # fine-tuning to a new head
    task = TASKS.build({"type": "SegmentationTask", "model": unet(), "num_classes": 4, "loss": {"type": "CrossEntropyLoss"}})
    framework_logger = logging.getLogger("framework")  # tools run in this process may have stopped propagation
    framework_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level("INFO", logger="framework"):
            (report,) = load_pretrained(task, str(tmp_path / "three_classes.pth"), None)
    finally:
        framework_logger.removeHandler(caplog.handler)
    learned = report.module_tensors - report.module_counters
    assert (f"task: loaded {learned - 2} of {learned} tensors ({(learned - 2) / learned:.0%}); left at their "
            "initial (random) values: 2 of another shape in the file (model.head.weight, model.head.bias)") in caplog.text

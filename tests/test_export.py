"""tools/export.py: ONNX (in onnxruntime) and TorchScript outputs checked here, independently of
the tool's own check, against what tools/infer.py computes (its predictors) at several input
sizes, odd ones among them: same output size, same values."""

import sys

import numpy as np
import pytest
import torch

from framework.engine.trained import load_trained_task
from framework.inference.generator import GeneratorPredictor
from framework.tasks.base import GeneratorTask
from support import REPO, call_tool

onnxruntime = pytest.importorskip("onnxruntime")  # the [export] extra (also in [dev])
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")  # TorchScript is deprecated, still shipped

DEEPLAB_CONFIG = REPO / "configs/segmentation/deeplabv3_shapes.yaml"  # random weights, nothing downloaded
ONNX_ATOL, TORCHSCRIPT_ATOL = 1e-4, 1e-5


def reference(task, inputs: torch.Tensor) -> np.ndarray:
    """What tools/infer.py computes for images 0..255 of any size (segmentation: the logits with the
    config's inference settings, whole-image in these configs; pix2pix: the EMA generator's images in [0, 1]), padded and cropped back by its predictors."""
    if isinstance(task, GeneratorTask):
        return GeneratorPredictor(task.generator_for()).translate(inputs).numpy()
    return task.predictor().logits(inputs).numpy()  # the config's inference settings, as infer


def run_exported(path, fmt, inputs: torch.Tensor) -> np.ndarray:
    if fmt == "onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == ["input"]
        return session.run(None, {"input": inputs.numpy()})[0]
    return torch.jit.load(str(path))(inputs).detach().numpy()


def check_export(config, checkpoint, overrides, fmt, tmp_path, sizes):
    output = tmp_path / f"model.{fmt}"
    weights = ["--checkpoint", checkpoint] if checkpoint else []
    result = call_tool("export", "--config", config, *weights, "--format", fmt, "--dynamic",
                       "--size", *sizes[0][1:], "--output", output, *overrides)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("max abs difference") == 4  # the export size and three more with --dynamic
    task, _ = load_trained_task(config, checkpoint, overrides)
    atol = ONNX_ATOL if fmt == "onnx" else TORCHSCRIPT_ATOL
    generator = torch.Generator().manual_seed(123)
    for batch, height, width in sizes:  # two sizes and batch sizes through the dynamic axes
        inputs = torch.randint(0, 256, (batch, 3, height, width), generator=generator).float()
        expected = reference(task, inputs)
        exported = run_exported(output, fmt, inputs)
        assert exported.shape == expected.shape
        assert np.abs(expected).max() > 1e-3  # a real output, not all zeros
        assert np.abs(exported - expected).max() <= atol


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_of_the_trained_unet(unet_run, tmp_path, fmt):
    # depth 2: sides padded to multiples of 4; 33 x 35 came back 36 x 36 before the padding moved inside
    check_export(unet_run.config, unet_run.checkpoint, [], fmt, tmp_path, [(1, 32, 32), (2, 33, 35), (1, 30, 47)])


def test_export_pads_to_the_size_divisor_infer_uses(unet_run, tmp_path):
    # inference.size_divisor 8 (the network's is 4): at 33 x 35 infer pads to 40 x 40, not 36 x 36,
    # and the logits near the border differ between the two
    check_export(unet_run.config, unet_run.checkpoint, ["+task.inference.size_divisor=8"], "torchscript", tmp_path,
                 [(1, 33, 35), (1, 36, 36)])


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_of_the_pix2pix_generator(pix2pix_run, tmp_path, fmt):
    check_export(pix2pix_run.config, pix2pix_run.checkpoint, [], fmt, tmp_path, [(1, 32, 32), (2, 33, 35), (1, 49, 63)])


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_of_a_torchvision_deeplabv3_with_random_weights(tmp_path, fmt):
    check_export(DEEPLAB_CONFIG, None, ["task.model.backbone=mobilenet_v3_large"], fmt, tmp_path,
                 [(1, 64, 64), (2, 72, 96), (1, 65, 67)])


def test_onnx_export_of_an_unconditional_generator_takes_noise(dcgan_run, tmp_path):
    output = tmp_path / "generator.onnx"
    result = call_tool("export", *dcgan_run.args(), "--format", "onnx", "--dynamic", "--output", output)
    assert result.returncode == 0, result.stderr
    task, _ = load_trained_task(dcgan_run.config, dcgan_run.checkpoint)
    noise = torch.randn(3, task.latent_dim, 1, 1, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = ((task.generator_ema(noise) + 1) / 2).clamp(0, 1).numpy()
    assert np.abs(run_exported(output, "onnx", noise) - expected).max() <= ONNX_ATOL


def test_onnx_export_refuses_without_the_extra(unet_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed: import fails
    output = tmp_path / "model.onnx"
    result = call_tool("export", *unet_run.args(), "--format", "onnx", "--output", output)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --format onnx needs onnx and onnxruntime")
    assert 'pip install -e ".[export]"' in result.stderr
    assert not list(tmp_path.iterdir())

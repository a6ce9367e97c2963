"""Export a trained network for deployment (ONNX, TorchScript), pre- and post-processing baked in,
and check the exported file against PyTorch on the same inputs.

What the exported models take and return (float32, RGB, N x C x H x W):
- segmentation: images with values 0..255 (a uint8 image cast to float) -> logits; the task's
  mean/std normalisation is inside the model.
- conditional GAN (pix2pix, CycleGAN): images 0..255 -> generated images in [0, 1].
Image inputs may have any height and width: inside the exported graph they are padded to the
network's size divisor and the output cropped back, as tools/infer.py does, so the exported model
and infer give the same size and values for the same image.
- unconditional GAN (DCGAN): noise N x latent_dim x 1 x 1 -> generated images in [0, 1].

ONNX uses torch's TorchScript-based exporter (`dynamo=False`: seconds instead of tens of
seconds for these networks, same outputs) and is checked in onnxruntime; both come with the
optional extra `pip install -e ".[export]"` and are imported only here, when asked for.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from framework.errors import ConfigError
from framework.inference.settings import network_size_divisor

FORMATS = ("onnx", "torchscript")
INPUT_NAME, OUTPUT_NAME = "input", "output"


def traceable_pad(x: torch.Tensor, divisor: int) -> torch.Tensor:
    """Zero-pad the bottom and right of N x C x H x W to multiples of `divisor` (what
    inference.segmentation.pad_to_multiple does) in a form a trace keeps for every size: a fixed
    pad of divisor - 1, then a slice whose end is computed from the traced input size. Python
    arithmetic on the pad amounts, or a branch on them, would freeze the export size's padding."""
    if divisor == 1:
        return x
    height, width = x.shape[-2], x.shape[-1]
    padded = F.pad(x, (0, divisor - 1, 0, divisor - 1))
    return padded[..., :(height + divisor - 1) // divisor * divisor, :(width + divisor - 1) // divisor * divisor]


class PaddedNetwork(nn.Module):
    """`network` on inputs of any size: padded to its size divisor, the output cropped back."""

    def __init__(self, network: nn.Module, size_divisor: int | None = None):
        """`size_divisor`: what inference pads to (a segmenter's `inference.size_divisor`), else the network's."""
        super().__init__()
        self.network = network
        self.size_divisor = size_divisor or network_size_divisor(network)

    def run_padded(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2], x.shape[-1]
        return self.network(traceable_pad(x, self.size_divisor))[..., :height, :width]


class NormalizedSegmenter(PaddedNetwork):
    def __init__(self, model: nn.Module, mean: torch.Tensor, std: torch.Tensor, size_divisor: int | None = None):
        super().__init__(model, size_divisor)
        self.register_buffer("mean", mean.detach().clone().float())
        self.register_buffer("std", std.detach().clone().float())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        # padded after normalisation (with zeros, i.e. the mean colour), as SegmentationPredictor does
        return self.run_padded((image - self.mean) / self.std)


class ImageTranslator(PaddedNetwork):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return ((self.run_padded(image / 127.5 - 1) + 1) / 2).clamp(0, 1)


class NoiseToImage(PaddedNetwork):
    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return ((self.network(noise) + 1) / 2).clamp(0, 1)


def example_inputs(kind: str, size: tuple[int, int], batch: int, channels: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if kind == "noise":
        return torch.randn(batch, channels, 1, 1, generator=generator)
    return torch.randint(0, 256, (batch, 3, *size), generator=generator).float()


def require_onnx():
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError as err:
        raise ConfigError(f"--format onnx needs onnx and onnxruntime ({err}); install the extra: "
                          "pip install -e \".[export]\"") from err
    return onnxruntime


def export(module: nn.Module, example: torch.Tensor, path: Path, fmt: str, dynamic: bool) -> None:
    """Write the exported model to `path` (through a temp file: never a partial file at `path`)."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format: one of {FORMATS}, got {fmt!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer and deprecation notices, not the user's concern
            if fmt == "onnx":
                require_onnx()
                axes = {0: "batch", 2: "height", 3: "width"} if dynamic else {}
                torch.onnx.export(module, (example,), str(tmp), input_names=[INPUT_NAME],
                                  output_names=[OUTPUT_NAME], opset_version=17, dynamo=False,
                                  dynamic_axes={INPUT_NAME: axes, OUTPUT_NAME: axes} if dynamic else None)
            else:
                torch.jit.save(torch.jit.trace(module, example), str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def run_exported(path: Path, fmt: str, inputs: torch.Tensor) -> np.ndarray:
    """The exported model's output on `inputs`, computed by onnxruntime or the TorchScript runtime."""
    if fmt == "onnx":
        session = require_onnx().InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {INPUT_NAME: inputs.numpy()})[0]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return torch.jit.load(str(path), map_location="cpu")(inputs).numpy()


def max_difference(module: nn.Module, path: Path, fmt: str, inputs: torch.Tensor) -> float:
    """Max absolute difference between PyTorch and the exported model on the same inputs."""
    with torch.no_grad():
        reference = module(inputs).numpy()
    exported = run_exported(path, fmt, inputs)
    if exported.shape != reference.shape:
        raise ConfigError(f"{path}: output shape {exported.shape}, PyTorch gives {reference.shape}")
    return float(np.abs(exported - reference).max())

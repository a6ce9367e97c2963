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

import copy
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

    def example_inputs(self, size: tuple[int, int], batch: int, seed: int) -> tuple[torch.Tensor, ...]:
        """What the exported module takes, drawn from `seed`: images 0..255 of its channels."""
        return example_inputs("image", size, batch, 0, seed, image_channels=self.in_channels)


class NormalizedSegmenter(PaddedNetwork):
    def __init__(self, model: nn.Module, mean: torch.Tensor, std: torch.Tensor, size_divisor: int | None = None):
        super().__init__(model, size_divisor)
        self.register_buffer("mean", mean.detach().clone().float())
        self.register_buffer("std", std.detach().clone().float())
        self.in_channels = int(self.mean.shape[1])  # one mean per channel of the data (N-channel data too)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        # padded after normalisation (with zeros, i.e. the mean colour), as SegmentationPredictor does
        return self.run_padded((image - self.mean) / self.std)


class ImageTranslator(PaddedNetwork):
    in_channels = 3  # RGB images, as the GAN datasets give

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return ((self.run_padded(image / 127.5 - 1) + 1) / 2).clamp(0, 1)


class NoiseToImage(PaddedNetwork):
    def __init__(self, network: nn.Module, noise_channels: int):
        super().__init__(network)
        self.noise_channels = noise_channels

    def example_inputs(self, size: tuple[int, int], batch: int, seed: int) -> tuple[torch.Tensor, ...]:
        """Noise N x noise_channels x 1 x 1 (the image size is the generator's own)."""
        return example_inputs("noise", size, batch, self.noise_channels, seed)

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return ((self.network(noise) + 1) / 2).clamp(0, 1)


def example_inputs(kind: str, size: tuple[int, int], batch: int, channels: int, seed: int,
                   noise_dim: int = 0, image_channels: int = 3) -> tuple[torch.Tensor, ...]:
    """The exported module's inputs: images 0..255 of `image_channels`, noise of `channels`, or label
    maps of class ids (0..channels - 1) with noise of `noise_dim` (none when 0)."""
    generator = torch.Generator().manual_seed(seed)
    if kind == "noise":
        return (torch.randn(batch, channels, 1, 1, generator=generator),)
    if kind == "labels":
        labels = torch.randint(0, channels, (batch, *size), generator=generator).float()
        return (labels, torch.randn(batch, noise_dim, generator=generator)) if noise_dim else (labels,)
    return (torch.randint(0, 256, (batch, image_channels, *size), generator=generator).float(),)


def input_axes(kind: str, count: int) -> dict[str, dict[int, str]]:
    """{input name: its dynamic axes}: the images' or label maps' batch, height and width; the noise's batch."""
    if kind == "labels":
        return {"labels": {0: "batch", 1: "height", 2: "width"}, "noise": {0: "batch"}} if count == 2 else \
            {"labels": {0: "batch", 1: "height", 2: "width"}}
    return {INPUT_NAME: {0: "batch", 2: "height", 3: "width"}}


def without_parametrizations(module: nn.Module) -> nn.Module:
    """`module`, or a copy with every parametrization (spectral norm's, whose sigma needs an
    operator ONNX lacks) replaced by the weight it gives now: the same outputs in eval mode."""
    from torch.nn.utils import parametrize

    if not any(parametrize.is_parametrized(sub) for sub in module.modules()):
        return module
    baked = copy.deepcopy(module)
    for sub in baked.modules():
        if parametrize.is_parametrized(sub):
            # A copy shares its parametrized class with the original, and removing a parametrization
            # edits that class: give the copy a class of its own first.
            cls = type(sub)
            namespace = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
            sub.__class__ = type(cls.__name__, cls.__bases__, namespace)
            for name in list(sub.parametrizations):
                parametrize.remove_parametrizations(sub, name, leave_parametrized=True)
    return baked


def require_onnx():
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError as err:
        raise ConfigError(f"--format onnx needs onnx and onnxruntime ({err}); install the extra: "
                          "pip install -e \".[export]\"") from err
    return onnxruntime


def export(module: nn.Module, example: tuple[torch.Tensor, ...], path: Path, fmt: str, dynamic: bool,
           kind: str = "image") -> None:
    """Write the exported model to `path` (through a temp file: never a partial file at `path`)."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format: one of {FORMATS}, got {fmt!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        module = without_parametrizations(module)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer and deprecation notices, not the user's concern
            if fmt == "onnx":
                require_onnx()
                axes = input_axes(kind, len(example))
                output_axes = {0: "batch", 2: "height", 3: "width"}
                torch.onnx.export(module, example, str(tmp), input_names=list(axes), output_names=[OUTPUT_NAME],
                                  opset_version=17, dynamo=False,
                                  dynamic_axes={**axes, OUTPUT_NAME: output_axes} if dynamic else None)
            else:
                torch.jit.save(torch.jit.trace(module, example), str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def run_exported(path: Path, fmt: str, inputs: tuple[torch.Tensor, ...], kind: str = "image") -> np.ndarray:
    """The exported model's output on `inputs` (one tensor, or a tuple: label maps and noise),
    computed by onnxruntime or the TorchScript runtime."""
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if fmt == "onnx":
        session = require_onnx().InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, dict(zip(input_axes(kind, len(inputs)), (x.numpy() for x in inputs))))[0]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return torch.jit.load(str(path), map_location="cpu")(*inputs).numpy()


def max_difference(module: nn.Module, path: Path, fmt: str, inputs: tuple[torch.Tensor, ...],
                   kind: str = "image") -> float:
    """Max absolute difference between PyTorch and the exported model on the same inputs."""
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    with torch.no_grad():
        reference = module(*inputs).numpy()
    exported = run_exported(path, fmt, inputs, kind)
    if exported.shape != reference.shape:
        raise ConfigError(f"{path}: output shape {exported.shape}, PyTorch gives {reference.shape}")
    return float(np.abs(exported - reference).max())

"""Perceptual loss: L1 between VGG features of the fake and the real image (Johnson et al.,
2016; pix2pixHD's VGG loss), each feature layer with its own weight.

    perceptual: {type: VGGPerceptualLoss, arch: vgg19, weight: 10.0,
                 layers: {relu1_1: 0.03125, relu2_1: 0.0625, relu3_1: 0.125, relu4_1: 0.25, relu5_1: 1.0}}

`weights` says where the ImageNet weights come from; nothing is ever downloaded:
- `torchvision` (default): the file torchvision would download (vgg19-dcbb9e9d.pth,
  vgg16-397923af.pth), read from the torch hub cache (`$TORCH_HOME/hub/checkpoints`);
- a path to a file in torchvision's layout (`features.<i>.weight`, ...);
- `random`: random weights, allowed only when asked for by name (demos and tests: the loss is
  then not perceptual).
The VGG is evaluated in float32 with autocast off, stays in eval mode, has no trainable
parameters and is no submodule: it is left out of the state dict (checkpoints), of the
optimizers and of DDP. Only the layers up to the deepest one asked for are built.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from framework.registry import LOSSES, did_you_mean
from framework.serialization.weights_file import read_weights_file

# torchvision's layer lists (models/vgg.py cfgs) and the files its IMAGENET1K_V1 weights download to.
VGG_CONFIGS = {"vgg16": "D", "vgg19": "E"}
VGG_FILES = {"vgg16": "vgg16-397923af.pth", "vgg19": "vgg19-dcbb9e9d.pth"}
PIX2PIXHD_LAYERS = {"relu1_1": 1 / 32, "relu2_1": 1 / 16, "relu3_1": 1 / 8, "relu4_1": 1 / 4, "relu5_1": 1.0}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def relu_positions(arch: str) -> dict[str, int]:
    """{"relu1_1": index in vgg.features, ...}: block b's i-th ReLU, counted as torchvision builds them."""
    from torchvision.models.vgg import cfgs

    positions, index, block, conv = {}, 0, 1, 0
    for item in cfgs[VGG_CONFIGS[arch]]:
        if item == "M":
            index, block, conv = index + 1, block + 1, 0
            continue
        conv += 1
        positions[f"relu{block}_{conv}"] = index + 1  # a conv, then its ReLU
        index += 2
    return positions


def hub_cache_file(arch: str) -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints" / VGG_FILES[arch]


def load_vgg_features(arch: str, weights: str, depth: int) -> nn.Sequential:
    """torchvision's `vgg.features[:depth]` with the weights `weights` names."""
    from torchvision.models.vgg import cfgs, make_layers

    features = make_layers(cfgs[VGG_CONFIGS[arch]])[:depth]
    if weights == "random":
        return features
    path = hub_cache_file(arch) if weights == "torchvision" else Path(os.path.expanduser(str(weights)))
    if not path.is_file():
        how = ("torchvision's ImageNet file from the torch hub cache" if weights == "torchvision"
               else "the file given")
        raise ValueError(f"weights: {arch} weights file {path.name} not found in {path.parent} ({how}; nothing is "
                         f"downloaded: place the file there, set weights to its path, or weights: random for a demo)")
    state = read_weights_file(path)  # a damaged or pickled-object file: one line naming it
    wanted = {key: value for key, value in state.items() if key.startswith("features.")}
    own = {f"features.{key}": value for key, value in features.state_dict().items()}
    missing = [key for key in own if key not in wanted or wanted[key].shape != own[key].shape]
    if missing:
        raise ValueError(f"weights: {path} is not a torchvision {arch} file: {len(missing)} tensors missing or of "
                         f"another shape, e.g. {missing[0]}")
    features.load_state_dict({key[len("features."):]: wanted[key] for key in own})
    return features


@LOSSES.register()
class VGGPerceptualLoss(nn.Module):
    """`weight` x sum over `layers` of layer weight x mean |VGG_l(fake) - VGG_l(real)|, on
    images in [-1, 1] (mapped to ImageNet's normalisation here)."""

    def __init__(self, arch: str = "vgg19", layers: dict[str, float] | None = None, weights: str = "torchvision",
                 weight: float = 10.0):
        super().__init__()
        if arch not in VGG_CONFIGS:
            raise ValueError(f"arch: unknown '{arch}'{did_you_mean(str(arch), VGG_CONFIGS)} (vgg16 or vgg19)")
        layers = dict(PIX2PIXHD_LAYERS if layers is None else layers)
        positions = relu_positions(arch)
        if not layers:
            raise ValueError("layers: name at least one VGG layer, e.g. {relu3_1: 1.0}")
        for name, layer_weight in layers.items():
            if name not in positions:
                raise ValueError(f"layers: {arch} has no layer '{name}'{did_you_mean(str(name), positions)}")
            if not isinstance(layer_weight, (int, float)) or layer_weight < 0:
                raise ValueError(f"layers.{name}: expected a weight >= 0, got {layer_weight!r}")
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight}")
        self.layers = {positions[name]: float(w) for name, w in layers.items()}
        self.weight = weight
        features = load_vgg_features(arch, str(weights), max(self.layers) + 1).eval().requires_grad_(False)
        # In a tuple, not an attribute nn.Module registers: no state dict entries, no parameters.
        self._vgg = (features,)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    @property
    def vgg(self) -> nn.Sequential:
        return self._vgg[0]

    def _apply(self, fn, recurse=True):
        self.vgg._apply(fn)  # .to(device), .float(), channels_last follow the task's
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> VGGPerceptualLoss:
        return super().train(False)  # the VGG stays in eval mode (it has no batch norm, but keep it fixed)

    def _features(self, images: torch.Tensor) -> dict[int, torch.Tensor]:
        x = ((images.float() + 1) / 2 - self.mean) / self.std
        found = {}
        for index, layer in enumerate(self.vgg):
            x = layer(x)
            if index in self.layers:
                found[index] = x
        return found

    def forward(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        if fake.shape[1] != 3:
            raise ValueError(f"the VGG perceptual loss needs 3-channel images, got {fake.shape[1]} channels")
        with torch.autocast(fake.device.type, enabled=False):
            fake_features = self._features(fake)
            with torch.no_grad():
                real_features = self._features(real)
            total = fake.new_zeros((), dtype=torch.float32)
            for index, layer_weight in self.layers.items():
                total = total + layer_weight * F.l1_loss(fake_features[index], real_features[index])
            return self.weight * total

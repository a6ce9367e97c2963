"""`weight_init:` on any model node: the papers' initialisation schemes, applied once when the
network is built.

    generator: {type: ResnetGenerator, weight_init: normal}                   # N(0, 0.02): pix2pix, CycleGAN
    generator: {type: SPADEGenerator, ..., weight_init: {scheme: xavier, gain: 0.02}}   # SPADE, OASIS

Schemes (the official pix2pix/CycleGAN `init_weights` and SPADE's `BaseNetwork.init_weights`):
every conv, transposed conv and linear weight drawn from
- `normal`: N(0, gain), gain 0.02 unless given;
- `xavier`: Xavier-normal with `gain` (0.02 unless given);
- `kaiming`: Kaiming-normal, fan in, for ReLU (no gain: the scheme fixes it);
- `orthogonal`: orthogonal with `gain` (0.02 unless given);
- `default`: the network as its constructor left it (each network documents its own: the
  pix2pix/CycleGAN networks draw N(0, 0.02) themselves, torchvision's and ours PyTorch's defaults).
Their biases are set to 0, and every BatchNorm's scale is drawn from N(1, gain) and its shift set
to 0, as both codes do (instance and group norms keep theirs, also as both codes). `biases: default`
draws each bias as PyTorch's layers do at construction, uniform in +-1/sqrt(fan_in), instead:
pix2pixHD's weights_init redraws the conv weights only.

    network: {type: ResnetGenerator, ..., weight_init: {scheme: normal, gain: 0.02, biases: default}}   # pix2pixHD

Not the `init:` key (framework/engine/pretrained.py), which loads pretrained weights into the
network after this: a node may have both (a scheme for what the file does not cover).

The key is applied before `spectral_norm` (that module imports this one, so this registry hook
comes first): spectral norm's power iteration must start from the final weights. Where a network
applied spectral norm itself, the drawn weight is the parametrisation's original and its power
iteration is run again.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.nn.utils import parametrize

from framework.errors import ConfigError
from framework.registry import MODELS, did_you_mean

SCHEMES = ("normal", "xavier", "kaiming", "orthogonal", "default")
BIASES = ("zero", "default")  # zero: the pix2pix/CycleGAN/SPADE codes; default: PyTorch's (pix2pixHD)
KEYS = ("scheme", "gain", "biases")
DEFAULT_GAIN = 0.02  # the official codes' init_gain / init_variance
INITIALISED_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                      nn.ConvTranspose3d, nn.Linear)


def initialise_weights_(network: nn.Module, scheme: str, gain: float = DEFAULT_GAIN, biases: str = "zero") -> nn.Module:
    """Re-draw every conv/linear weight of `network` by `scheme`, biases 0 (or `biases: default`,
    PyTorch's uniform +-1/sqrt(fan_in)), BatchNorm scales N(1, gain) and shifts 0; in place,
    returns the network. `default` changes nothing."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(map(repr, SCHEMES))}")
    if scheme == "default":
        return network
    for layer in network.modules():
        if isinstance(layer, INITIALISED_LAYERS):
            _draw(_weight_of(layer), scheme, gain)
            _restart_power_iteration(layer)
            if layer.bias is not None:
                _draw_bias(layer.bias, _weight_of(layer), biases)
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm) and layer.weight is not None:
            nn.init.normal_(layer.weight, 1.0, gain)
            nn.init.zeros_(layer.bias)
    return network


def _weight_of(layer: nn.Module):
    """The stored weight: under a parametrisation (spectral norm applied by a network itself)
    `layer.weight` is computed from `parametrizations.weight.original`, which is what to draw."""
    if parametrize.is_parametrized(layer, "weight"):
        return layer.parametrizations.weight.original
    return layer.weight


# As many power iterations as torch's spectral_norm runs when it is applied.
POWER_ITERATIONS_AT_START = 15


@torch.no_grad()
def _restart_power_iteration(layer: nn.Module) -> None:
    """A network that applies spectral norm itself (SPADEGenerator, OASISDiscriminator) has run the
    power iteration on the weights its constructor drew: run it again on the new ones, so that the
    first forward (an evaluation at iteration 0 too) divides by their largest singular value."""
    if not parametrize.is_parametrized(layer, "weight"):
        return
    for parametrisation in layer.parametrizations.weight:
        if hasattr(parametrisation, "_power_method") and hasattr(parametrisation, "_u"):
            matrix = parametrisation._reshape_weight_to_matrix(layer.parametrizations.weight.original)
            parametrisation._power_method(matrix, POWER_ITERATIONS_AT_START)


@torch.no_grad()
def _draw_bias(bias: torch.Tensor, weight: torch.Tensor, biases: str) -> None:
    if biases == "zero":
        nn.init.zeros_(bias)
        return
    fan_in, _ = nn.init._calculate_fan_in_and_fan_out(weight)  # as the layers' reset_parameters
    bound = 1 / fan_in ** 0.5 if fan_in > 0 else 0.0
    nn.init.uniform_(bias, -bound, bound)


def _draw(weight, scheme: str, gain: float) -> None:
    if scheme == "normal":
        nn.init.normal_(weight, 0.0, gain)
    elif scheme == "xavier":
        nn.init.xavier_normal_(weight, gain=gain)
    elif scheme == "kaiming":
        nn.init.kaiming_normal_(weight, a=0, mode="fan_in")
    else:
        nn.init.orthogonal_(weight, gain=gain)


def parse_weight_init(value, path: str) -> tuple[str, float, str]:
    """(scheme, gain, biases) from `weight_init: <scheme>` or `{scheme: <scheme>, gain: <float>, biases: ...}`."""
    if isinstance(value, str):
        value = {"scheme": value}
    if not isinstance(value, Mapping) or "scheme" not in value:
        raise ConfigError(f"{path}.weight_init: expected a scheme ({', '.join(SCHEMES)}) or "
                          f"{{scheme: ..., gain: ...}}, got {value!r}")
    for key in value:
        if key not in KEYS:
            raise ConfigError(f"{path}.weight_init.{key}: unknown key{did_you_mean(str(key), KEYS)} "
                              f"(allowed: {', '.join(KEYS)})")
    biases = value.get("biases", "zero")
    if biases not in BIASES or (value["scheme"] == "default" and "biases" in value):  # default draws nothing
        raise ConfigError(f"{path}.weight_init.biases: expected zero or default (PyTorch's uniform, pix2pixHD's), "
                          f"with a scheme that draws; got {biases!r}")
    scheme = value["scheme"]
    if scheme not in SCHEMES:
        raise ConfigError(f"{path}.weight_init.scheme: unknown scheme {scheme!r}{did_you_mean(str(scheme), SCHEMES)} "
                          f"(choose one of {', '.join(SCHEMES)})")
    gain = value.get("gain", DEFAULT_GAIN)
    if "gain" in value and scheme in ("kaiming", "default"):
        raise ConfigError(f"{path}.weight_init.gain: the {scheme} scheme takes no gain (kaiming's is fixed "
                          "by ReLU, default draws nothing); remove it")
    if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not gain > 0:
        raise ConfigError(f"{path}.weight_init.gain: expected a positive number, got {gain!r}")
    return scheme, float(gain), biases


def _apply_setting(network: nn.Module, settings: dict, path: str) -> None:
    scheme, gain, biases = parse_weight_init(settings["weight_init"], path)
    initialise_weights_(network, scheme, gain, biases)
    network.weight_init = {"scheme": scheme, "gain": gain}  # what was drawn, for reports and tests
    if biases != "zero":
        network.weight_init["biases"] = biases


MODELS.allow_keys(("weight_init",), _apply_setting)

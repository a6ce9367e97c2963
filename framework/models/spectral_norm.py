"""`spectral_norm: true` on any model node: every conv and linear layer of the network
spectrally normalised (Miyato et al., 2018) with torch's parametrisation.

    discriminator: {type: PatchGANDiscriminator, in_channels: 6, spectral_norm: true}

torch.nn.utils.parametrizations.spectral_norm divides each weight by its largest singular
value, estimated by one power iteration per training forward. The iteration's vectors `_u`
and `_v` are buffers of the parametrisation, so they are in the state dict: a checkpoint
holds them and a resumed run continues the iteration where it stopped. Under DDP the wrapper
broadcasts rank 0's buffers at each forward and every rank's weights are equal, so the
vectors stay equal on every rank.

The key is applied when the network is built (a registry hook), before a task copies the
network (an EMA generator gets the same parametrisation) and before optimizers pick its
parameters (`<layer>.parametrizations.weight.original`).
"""

from __future__ import annotations

from torch import nn

from framework.errors import ConfigError
from framework.models import weight_init  # noqa: F401  (its registry hook first: init, then spectral norm)
from framework.registry import MODELS

NORMALISED_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                     nn.ConvTranspose3d, nn.Linear)


def apply_spectral_norm(network: nn.Module, n_power_iterations: int = 1) -> nn.Module:
    """Spectral normalisation on every conv/linear weight of `network`, in place; returns it."""
    from torch.nn.utils.parametrizations import spectral_norm

    layers = [m for m in network.modules() if isinstance(m, NORMALISED_LAYERS)]
    if not layers:
        raise ValueError(f"spectral_norm: {type(network).__name__} has no conv or linear layer to normalise")
    for layer in layers:
        if _spectrally_normalised(layer):  # by the network itself (norm: spectralinstance): once is enough
            continue
        # Transposed convs keep the output channels on dim 1 of their weight.
        dim = 1 if isinstance(layer, nn.modules.conv._ConvTransposeNd) else 0
        spectral_norm(layer, n_power_iterations=n_power_iterations, dim=dim)
    return network


def _spectrally_normalised(layer: nn.Module) -> bool:
    from torch.nn.utils import parametrize

    return parametrize.is_parametrized(layer, "weight") and any(
        type(p).__name__ == "_SpectralNorm" for p in layer.parametrizations.weight)


def _apply_setting(network: nn.Module, settings: dict, path: str) -> None:
    value = settings["spectral_norm"]
    if not isinstance(value, bool):
        raise ConfigError(f"{path}.spectral_norm: expected true or false, got {value!r}")
    if value:
        try:
            apply_spectral_norm(network)
        except ValueError as err:
            raise ConfigError(f"{path}.{err}") from err


MODELS.allow_keys(("spectral_norm",), _apply_setting)

"""Loading 3-channel weights into a network with another number of input channels.

Opt-in per load (`adapt_in_channels: zeros | mean` in `init` / `load_from`; encoder-decoder
models pass their own `adapt_in_channels` with `encoder_weights`). A conv weight of the file
whose shape differs from the network's in the input-channel dimension only (the stem) is not
skipped as a shape mismatch but adapted (framework/models/encoders/stem.py says how) and
loaded; `load_report.json` lists it among the loaded keys with `adapted: <method>` and both
shapes, and counts it under `adapted`. The BatchNorm after the stem keeps its shape (only the
conv's input side changes), so no buffer needs re-initialising.
"""

from __future__ import annotations

import torch

from framework.models.encoders.stem import adapt_input_channels


def differs_in_input_channels_only(source: torch.Size, target: torch.Size) -> bool:
    return len(source) == len(target) == 4 and source[0] == target[0] and source[2:] == target[2:]


def adapt_stems(weights: dict[str, torch.Tensor], own: dict[str, torch.Tensor], selected: dict[str, torch.Tensor],
                report, method: str) -> None:
    """Move every stem-like shape mismatch of `report` into `selected` (adapted) and `report.loaded`."""
    still_mismatched = []
    for entry in report.shape_mismatched:
        key, source = entry["key"], weights[entry["source"]]
        if not differs_in_input_channels_only(source.shape, own[key].shape):
            still_mismatched.append(entry)
            continue
        selected[key] = adapt_input_channels(source, own[key].shape[1], method).to(own[key].dtype)
        report.loaded.append({"key": key, "source": entry["source"], "adapted": method,
                              "checkpoint_shape": entry["checkpoint_shape"], "model_shape": entry["model_shape"]})
    report.shape_mismatched = still_mismatched
    position = {key: i for i, key in enumerate(own)}
    report.loaded.sort(key=lambda e: position[e["key"]])

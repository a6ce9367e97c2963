"""What every encoder-decoder segmenter shares: the encoder, padding, the head's upsampling.

    {type: EncoderUNet | FPN | DeepLabV3Plus, encoder: resnet34, encoder_weights: PATH | torchvision[:TAG] | null,
     in_channels: 3, num_classes: N, adapt_in_channels: zeros | mean, encoder_depth: null | N,
     aux_loss_weight: 0 | w, aux_stage: -2, ...}

`encoder_depth` keeps the encoder's first maps only (as smp's): 4 on a ResNet drops layer4,
three quarters of resnet18's parameters, which a 64x64 image reduces to a 2x2 map.

Any input size works: the input is padded (right and bottom, with zeros, i.e. the mean colour
after normalisation) to a multiple of the encoder's output stride and the logits cropped back,
so the output is N x num_classes x H x W for any H x W.

`aux_loss_weight` > 0 adds an auxiliary head (framework/models/aux_head.py) on the encoder map
`aux_stage` (the penultimate by default: ResNet's layer3, as PSPNet and MMSegmentation use);
in training mode the model then returns `LogitsWithAux` and the task adds the weighted loss.

`encoder_weights` is only recorded here; the weights are loaded by the engine when training
starts (framework/weights/encoder_weights.py), through the partial-loading path that writes
`load_report.json`, so a model built for evaluation never needs the file.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from framework.models.aux_head import AuxHead, LogitsWithAux, check_aux_loss_weight
from framework.models.encoders import Encoder, build_encoder
from framework.models.encoders.stem import ADAPT_METHODS


class EncoderDecoder(nn.Module):
    """Subclasses build `self.decoder` (features -> a map) and `self.head` (map -> logits)."""

    def __init__(self, encoder: str | Encoder, num_classes: int, in_channels: int = 3,
                 encoder_weights: str | None = None, adapt_in_channels: str = "zeros", output_stride: int = 32,
                 encoder_depth: int | None = None, aux_loss_weight: float = 0.0, aux_stage: int = -2):
        super().__init__()
        if adapt_in_channels not in ADAPT_METHODS:
            raise ValueError(f"adapt_in_channels must be one of {', '.join(ADAPT_METHODS)}, got {adapt_in_channels!r}")
        if encoder_weights is not None and not isinstance(encoder_weights, str):
            raise ValueError(f"encoder_weights must be a file path, 'torchvision' (or 'torchvision:TAG') or null, "
                             f"got {encoder_weights!r}")
        if isinstance(encoder, Encoder):  # a built encoder (shared, or a custom one)
            if encoder.in_channels != in_channels:
                raise ValueError(f"the encoder takes {encoder.in_channels} channels, in_channels is {in_channels}")
            if encoder_depth is not None:
                raise ValueError("encoder_depth applies to an encoder built from its name, not to a built one")
            self.encoder = encoder
        else:
            self.encoder = build_encoder(encoder, in_channels, output_stride, encoder_depth)
        self.num_classes = num_classes
        self.encoder_weights = encoder_weights
        self.adapt_in_channels = adapt_in_channels
        self.size_multiple = self.encoder.strides[-1]
        self.aux_loss_weight = check_aux_loss_weight(aux_loss_weight)
        if self.aux_loss_weight:
            maps = len(self.encoder.channels)
            if isinstance(aux_stage, bool) or not isinstance(aux_stage, int) or not -maps <= aux_stage < maps:
                raise ValueError(f"aux_stage must be an index into the encoder's {maps} maps "
                                 f"(-{maps} to {maps - 1}), got {aux_stage!r}")
            self.aux_stage = aux_stage
            self.aux_head = AuxHead(self.encoder.channels[aux_stage], num_classes)

    def decode(self, features: list[torch.Tensor]) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor | LogitsWithAux:
        height, width = x.shape[-2:]
        pad_h, pad_w = -height % self.size_multiple, -width % self.size_multiple
        if torch.jit.is_tracing() or pad_h or pad_w:  # traced for export: the padding follows the input size
            x = F.pad(x, (0, pad_w, 0, pad_h))
        features = self.encoder(x)
        logits = to_input_size(self.head(self.decode(features)), x, height, width)
        if self.training and self.aux_loss_weight:
            return LogitsWithAux(logits, to_input_size(self.aux_head(features[self.aux_stage]), x, height, width))
        return logits


def to_input_size(logits: torch.Tensor, padded: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Logits upsampled to the padded input's size, then cropped to the input's."""
    if torch.jit.is_tracing() or logits.shape[-2:] != padded.shape[-2:]:
        logits = F.interpolate(logits, size=padded.shape[-2:], mode="bilinear", align_corners=False)
    return logits[..., :height, :width]


def first_at_stride(encoder: Encoder, stride: int) -> int:
    """Index of the first feature map whose stride is at least `stride`."""
    return next(i for i, s in enumerate(encoder.strides) if s >= stride)

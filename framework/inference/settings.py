"""Inference settings: the `inference:` keyword of SegmentationTask (validation during training,
tools/test.py and tools/infer.py all predict with them, so what is measured is what is run).

    inference:
      mode: whole          # whole: the full image at once; slide: overlapping crop-size tiles
      crop: [256, 256]     # slide: tile height, width (one int for a square)
      stride: [171, 171]   # slide: step between tiles (< crop: tiles overlap, logits averaged)
      tile_batch: 4        # slide: tiles per forward pass; bounds the memory, whatever the image size
      flip: false          # also predict the horizontally flipped image; logits averaged
      scales: [1.0]        # multi-scale: resize by each, predict, resize logits back, average
      size_divisor: auto   # pad sides to a multiple of this, crop back (auto: from the network)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MODES = ("whole", "slide")


def _pair(value, key: str) -> tuple[int, int] | None:
    if value is None:
        return None
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"inference.{key}: expected a positive int or [height, width], got {value!r}")
    return pair  # type: ignore[return-value]


@dataclass(frozen=True)
class InferenceSettings:
    mode: str = "whole"
    crop: tuple[int, int] | None = None
    stride: tuple[int, int] | None = None
    tile_batch: int = 4
    flip: bool = False
    scales: tuple[float, ...] = (1.0,)
    size_divisor: int | str = "auto"

    @classmethod
    def from_config(cls, node: dict | None) -> InferenceSettings:
        """Checked settings from a config mapping; a wrong key or value is a ValueError naming it."""
        node = dict(node or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(node) - known)
        if unknown:
            raise ValueError(f"inference: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**node)

    def replace(self, **changes) -> InferenceSettings:
        """A copy with the non-None `changes` applied (command-line options over the config)."""
        node = {f.name: getattr(self, f.name) for f in fields(self)}
        node.update({k: v for k, v in changes.items() if v is not None})
        return InferenceSettings.from_config(node)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"inference.mode: must be one of {MODES}, got {self.mode!r}")
        object.__setattr__(self, "crop", _pair(self.crop, "crop"))
        object.__setattr__(self, "stride", _pair(self.stride, "stride") or self.crop)
        if self.mode == "slide" and self.crop is None:
            raise ValueError("inference.crop: slide mode needs a tile size, e.g. crop: [256, 256]")
        if self.stride and self.crop and any(s > c for s, c in zip(self.stride, self.crop)):
            raise ValueError(f"inference.stride {list(self.stride)} larger than crop {list(self.crop)} "
                             "would leave pixels no tile covers")
        if not isinstance(self.tile_batch, int) or self.tile_batch < 1:
            raise ValueError(f"inference.tile_batch: must be a positive integer, got {self.tile_batch!r}")
        scales = (self.scales,) if isinstance(self.scales, (int, float)) else tuple(self.scales)
        if not scales or not all(isinstance(s, (int, float)) and s > 0 for s in scales):
            raise ValueError(f"inference.scales: expected positive numbers, got {self.scales!r}")
        object.__setattr__(self, "scales", tuple(float(s) for s in scales))
        divisor = self.size_divisor
        if divisor != "auto" and not (isinstance(divisor, int) and divisor >= 1):
            raise ValueError(f"inference.size_divisor: must be auto or a positive integer, got {divisor!r}")


# Attributes of the framework's networks that fix the multiple their input sides must be.
_DIVISOR_ATTRIBUTES = ("depth", "num_downs", "num_downsampling")


def network_size_divisor(network) -> int:
    """The multiple a network's input height and width must be: its `size_divisor` attribute,
    else 2**depth (UNet), 2**num_downs (pix2pix UNetGenerator), 2**num_downsampling (ResNet
    generator), else 1 (torchvision models take any size)."""
    from framework.dist import unwrap  # lazy: the settings themselves need no torch

    network = unwrap(network)
    if isinstance(getattr(network, "size_divisor", None), int):
        return network.size_divisor
    for name in _DIVISOR_ATTRIBUTES:
        value = getattr(network, name, None)
        if isinstance(value, int):
            return 2**value
    return 1

"""Encoders: backbones returning multi-scale feature maps. Importing registers them in ENCODERS
(torchvision's) and the `timm:<name>` family (timm imported only when such an encoder is built).

Owns: the `Encoder` contract and `ENCODERS` (`base.py`), torchvision and timm backbones, the stem's
in-channel adaptation rule (`stem.py`).
May import: registry; nothing else of the framework.
"""

from framework.models.encoders import timm_encoders, torchvision_encoders  # noqa: F401  (they register themselves)
from framework.models.encoders.base import ENCODER_FAMILIES, ENCODERS, Encoder, build_encoder, register_family
from framework.models.encoders.torchvision_encoders import TorchvisionEncoder, register_torchvision

__all__ = ["ENCODERS", "ENCODER_FAMILIES", "Encoder", "TorchvisionEncoder", "build_encoder", "register_family",
           "register_torchvision"]

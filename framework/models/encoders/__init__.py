"""Encoders: backbones returning multi-scale feature maps. Importing registers them in ENCODERS."""

from framework.models.encoders import torchvision_encoders  # noqa: F401
from framework.models.encoders.base import ENCODERS, Encoder, build_encoder
from framework.models.encoders.torchvision_encoders import TorchvisionEncoder, register_torchvision

__all__ = ["ENCODERS", "Encoder", "TorchvisionEncoder", "build_encoder", "register_torchvision"]

"""Networks. Importing this package registers every model family in MODELS."""

from framework.models import layers, torchvision_seg, unet  # noqa: F401
from framework.models.layers import build_norm
from framework.models.torchvision_seg import FCN, DeepLabV3
from framework.models.unet import UNet

__all__ = ["build_norm", "UNet", "DeepLabV3", "FCN"]

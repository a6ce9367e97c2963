"""Networks. Importing this package registers every model family in MODELS."""

from framework.models import decoders, encoders, layers, torchvision_seg, unet  # noqa: F401
from framework.models.decoders import FPN, DeepLabV3Plus, EncoderUNet
from framework.models.layers import build_norm, init_gan_weights_
from framework.models.torchvision_seg import FCN, DeepLabV3
from framework.models.unet import UNet

__all__ = ["build_norm", "init_gan_weights_", "UNet", "DeepLabV3", "FCN", "EncoderUNet", "FPN", "DeepLabV3Plus"]

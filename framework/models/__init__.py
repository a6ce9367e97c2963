"""Networks. Importing this package registers every model family in MODELS (and the
`spectral_norm` and `weight_init` keys of model nodes, framework/models/spectral_norm.py and
weight_init.py).

Owns: networks only: UNet, torchvision's DeepLabV3/FCN, encoder-decoder segmenters (`encoders/`,
`decoders/`), SPADE/OASIS generators, discriminators (pix2pixHD's/SPADE's multi-scale, OASIS's),
DiffAugment, shared layers and the auxiliary head, the `weight_init` schemes; nothing of losses
or optimizers.
May import: errors, registry, dist (DiffAugment's adaptive p agreed over ranks).
"""

from framework.models import decoders, encoders, layers, spade, spectral_norm, torchvision_seg, unet, weight_init  # noqa: F401
from framework.models.decoders import FPN, DeepLabV3Plus, EncoderUNet
from framework.models.diff_augment import DiffAugment
from framework.models.discriminators import DiscriminatorOutput, MultiScaleDiscriminator
from framework.models.layers import build_norm, init_gan_weights_
from framework.models.oasis_discriminator import OASISDiscriminator
from framework.models.spade import SPADE, SPADEGenerator, SPADEResBlock, one_hot_labels, resize_labels
from framework.models.spectral_norm import apply_spectral_norm
from framework.models.torchvision_seg import FCN, DeepLabV3
from framework.models.unet import UNet
from framework.models.weight_init import initialise_weights_

__all__ = ["DiffAugment", "DiscriminatorOutput", "MultiScaleDiscriminator", "OASISDiscriminator", "apply_spectral_norm", "build_norm",
           "init_gan_weights_", "initialise_weights_", "SPADE", "SPADEGenerator", "SPADEResBlock", "one_hot_labels", "resize_labels", "UNet", "DeepLabV3", "FCN", "EncoderUNet", "FPN", "DeepLabV3Plus"]

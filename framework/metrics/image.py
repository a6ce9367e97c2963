"""Image-quality metrics for generated images: PSNR, SSIM, L1 and FID.

They read `outputs["fake"]` and `outputs["real"]`: N x C x H x W float images in [0, 1]
(what GANTask.val_step returns). With `suffix` (PSNR, SSIM, L1), e.g. `{type: PSNR, suffix: _ab}`,
they read `fake_ab` and `real_ab` and report `PSNR_ab` (CycleGANTask's two directions); on an
evaluation dataset whose samples do not pair by name (`paired_by_name` false: unpaired test
folders) such a metric has no reference to compare with and reports nothing. PSNR, SSIM and L1 keep sums (of per-image values, or of
absolute errors) and counts, so one all_reduce per state gives the dataset's values under DDP.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from framework.metrics.base import Metric
from framework.registry import METRICS
from framework.serialization.weights_file import read_weights_file

# A perfect reconstruction would have an infinite PSNR; its MSE is floored to give 100 dB.
MIN_MSE = 1e-10


def _pair(outputs: dict[str, Any], suffix: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    fake_key, real_key = f"fake{suffix}", f"real{suffix}"
    if fake_key not in outputs or real_key not in outputs:
        raise ValueError(f"the task's evaluation outputs hold no '{fake_key}' and '{real_key}' images to compare "
                         f"(they have: {', '.join(sorted(outputs))})")
    fake, real = outputs[fake_key], outputs[real_key]
    if fake.shape != real.shape:
        raise ValueError(f"fake {tuple(fake.shape)} and real {tuple(real.shape)} images differ in shape")
    return fake.float(), real.float()


class _Paired(Metric):
    """A metric of fake against real images, optionally of the outputs named with `suffix`."""

    def __init__(self, suffix: str = "") -> None:
        super().__init__()
        self.suffix = str(suffix)
        self.active = True

    def use_dataset(self, dataset, path: str, dataset_path: str) -> None:
        # A dataset that says its samples do not pair up (unpaired test folders) has no reference.
        self.active = not self.suffix or getattr(dataset, "paired_by_name", True)
        if not self.active:
            logging.getLogger("framework").info(
                f"{path}: {type(self).__name__} with suffix {self.suffix} needs evaluation samples that pair by name; "
                f"{dataset_path} does not ({type(dataset).__name__}): only images are logged")

    def pair(self, outputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        return _pair(outputs, self.suffix)


class _PerImageMean(_Paired):
    """The mean over images of a per-image value, kept as (sum, count)."""

    key = ""

    def __init__(self, suffix: str = "") -> None:
        super().__init__(suffix)
        self.add_state("total", torch.zeros((), dtype=torch.float64))
        self.add_state("count", torch.zeros((), dtype=torch.int64))

    def per_image(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def update(self, outputs: dict[str, Any]) -> None:
        if not self.active:
            return
        fake, real = self.pair(outputs)
        self.to(real.device)
        self.total += self.per_image(fake, real).double().sum()
        self.count += real.shape[0]

    def result_names(self) -> list[str]:
        return [self.key + self.suffix] if self.active else []

    def compute(self) -> dict[str, float]:
        if not self.active:
            return {}
        return {self.key + self.suffix: (self.total / self.count).item()}


@METRICS.register()
class PSNR(_PerImageMean):
    """Peak signal-to-noise ratio in dB, 10 log10(1 / MSE) per image, averaged over images."""

    key = "PSNR"

    def per_image(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        mse = (fake - real).pow(2).flatten(1).mean(dim=1)
        return 10 * torch.log10(1 / mse.clamp_min(MIN_MSE))


@METRICS.register()
class SSIM(_PerImageMean):
    """Structural similarity (Wang et al., 2004) with a Gaussian window, per image over every
    pixel and channel, averaged over images. Borders are reflection-padded, as torchmetrics
    does (it is the reference this is tested against)."""

    key = "SSIM"

    def __init__(self, kernel_size: int = 11, sigma: float = 1.5, k1: float = 0.01, k2: float = 0.03,
                 suffix: str = ""):
        super().__init__(suffix)
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd number, got {kernel_size}")
        self.kernel_size, self.sigma = kernel_size, sigma
        self.c1, self.c2 = k1**2, k2**2  # for a data range of 1

    def _window(self, channels: int, device: torch.device) -> torch.Tensor:
        coords = torch.arange(self.kernel_size, dtype=torch.float32, device=device) - (self.kernel_size - 1) / 2
        gauss = torch.exp(-(coords**2) / (2 * self.sigma**2))
        gauss = gauss / gauss.sum()
        return (gauss[:, None] * gauss[None, :]).expand(channels, 1, -1, -1).contiguous()

    def check_image_size(self, height: int, width: int) -> None:
        if min(height, width) <= self.kernel_size // 2:  # reflection padding needs more
            raise ValueError(f"images of {(height, width)} are smaller than the SSIM window {self.kernel_size}")

    def per_image(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        self.check_image_size(*real.shape[-2:])
        channels = real.shape[1]
        window = self._window(channels, real.device)
        # One depthwise convolution computes the five local moments at once.
        pad = (self.kernel_size - 1) // 2
        fake, real = (F.pad(x, (pad, pad, pad, pad), mode="reflect") for x in (fake, real))
        stacked = torch.cat([fake, real, fake * fake, real * real, fake * real], dim=1)
        moments = F.conv2d(stacked, window.repeat(5, 1, 1, 1), groups=5 * channels)
        mu_f, mu_r, ff, rr, fr = moments.split(channels, dim=1)
        # Rounding can make a flat region's variance slightly negative.
        var_f, var_r, cov = (ff - mu_f**2).clamp_min(0), (rr - mu_r**2).clamp_min(0), fr - mu_f * mu_r
        ssim = ((2 * mu_f * mu_r + self.c1) * (2 * cov + self.c2)) / (
            (mu_f**2 + mu_r**2 + self.c1) * (var_f + var_r + self.c2))
        return ssim.flatten(1).mean(dim=1)


@METRICS.register("L1")
class L1Distance(_Paired):
    """Mean absolute difference over every pixel and channel (on the [0, 1] scale)."""

    def __init__(self, suffix: str = "") -> None:
        super().__init__(suffix)
        self.add_state("total", torch.zeros((), dtype=torch.float64))
        self.add_state("count", torch.zeros((), dtype=torch.int64))

    def update(self, outputs: dict[str, Any]) -> None:
        if not self.active:
            return
        fake, real = self.pair(outputs)
        self.to(real.device)
        self.total += (fake - real).abs().sum(dtype=torch.float64)
        self.count += real.numel()

    def result_names(self) -> list[str]:
        return ["L1" + self.suffix] if self.active else []

    def compute(self) -> dict[str, float]:
        if not self.active:
            return {}
        return {"L1" + self.suffix: (self.total / self.count).item()}


# ----------------------------------------------------------------------------- FID

FID_EXTRACTORS = ("fid-inception", "torchvision")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class TorchvisionInceptionFeatures(nn.Module):
    """2048-d pool features of torchvision's Inception v3 from a local ImageNet weights file
    (e.g. inception_v3_google-0cc3c7bd.pth). Input: float images in [0, 1], any size."""

    num_features = 2048

    def __init__(self, weights_path: str):
        super().__init__()
        from torchvision.models import inception_v3

        # transform_input as torchvision sets it for these weights (inception_v3(weights=IMAGENET1K_V1)):
        # they were ported from TensorFlow and expect inputs in [-1, 1], which it makes of the
        # ImageNet-normalised images given to it.
        network = inception_v3(weights=None, aux_logits=False, init_weights=False, transform_input=True)
        state = read_weights_file(weights_path)  # a damaged or pickled-object file: one line naming it
        state = {k: v for k, v in state.items() if not k.startswith("AuxLogits.")}  # not in this network
        network.load_state_dict(state)
        network.fc = nn.Identity()
        self.network = network.eval().requires_grad_(False)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> TorchvisionInceptionFeatures:
        return super().train(False)  # batch-norm statistics stay the pretrained ones

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        images = F.interpolate(images.float(), size=(299, 299), mode="bilinear", align_corners=False)
        return self.network((images - self.mean) / self.std)


def image_bytes(images: torch.Tensor) -> torch.Tensor:
    """Images in [0, 1] as the 0..255 bytes an 8-bit file of them holds: rounded to the nearest
    level (what saving a PNG and handing torch-fidelity the file gives), not truncated (torchmetrics'
    `(images * 255).byte()` turns 0.999 / 255 into 0 and darkens every image by half a level)."""
    return (images.float() * 255).add_(0.5).clamp_(0, 255).to(torch.uint8)


def local_inception_weights(weights_path: str | None, extractor: str, metric: str) -> str:
    """The checked local path of the Inception weights of `metric` (FID, KID): the extractor
    known, the file there and readable, torch-fidelity installed for its extractor."""
    if extractor not in FID_EXTRACTORS:
        raise ValueError(f"extractor: unknown '{extractor}' (choose one of {', '.join(FID_EXTRACTORS)})")
    if not weights_path:
        raise ValueError(f"weights_path: {metric} needs a local Inception weights file and never downloads one; "
                         f"set weights_path (see the FID docs) or remove the {metric} metric")
    weights_path = os.path.expanduser(str(weights_path))
    if not os.path.isfile(weights_path):
        raise ValueError(f"weights_path: Inception weights file not found: {weights_path}")
    if extractor == "fid-inception":
        try:  # before torchmetrics (a slow import) is built on top of it
            import torch_fidelity  # noqa: F401
        except ImportError as err:
            raise ValueError("extractor fid-inception needs the torch-fidelity package, which is not installed: "
                             "pip install 'segan-framework[fid]' (or torch-fidelity); or use extractor: "
                             "torchvision with torchvision's Inception v3 weights file") from err
        read_weights_file(weights_path)  # torch-fidelity reads it again; a bad file fails here in one line
    return weights_path


@METRICS.register()
class FID(Metric):
    """Fréchet Inception Distance between the real and the generated images (torchmetrics).

    The Inception weights come only from `weights_path`, a local file; nothing is downloaded.
    - extractor "fid-inception" (default): the standard FID Inception of torch-fidelity, so
      values compare with published ones. Needs the torch-fidelity package and its weights
      file (pt_inception-2015-12-05-6726825d.pth). `feature`: 64, 192, 768 or 2048. It is given the
      images as rounded bytes (`image_bytes`), as torch-fidelity reads them from 8-bit files.
    - extractor "torchvision": torchvision's ImageNet Inception v3 (inception_v3_google-*.pth),
      2048-d features. Good for comparing runs with each other, not with papers.
    Lower is better; values are meaningful with a few thousand images, not a handful.
    """

    STATES = ("real_features_sum", "real_features_cov_sum", "real_features_num_samples",
              "fake_features_sum", "fake_features_cov_sum", "fake_features_num_samples")

    def __init__(self, weights_path: str | None = None, extractor: str = "fid-inception", feature: int = 2048):
        super().__init__()
        weights_path = local_inception_weights(weights_path, extractor, "FID")
        from torchmetrics.image.fid import FrechetInceptionDistance

        # sync_on_compute off: states are summed across ranks by `sync` (one all_reduce each).
        if extractor == "torchvision":
            self.fid = FrechetInceptionDistance(feature=TorchvisionInceptionFeatures(weights_path), normalize=True,
                                                sync_on_compute=False)
            self.bytes_in = False  # torchvision's network takes the float images themselves
            return
        # normalize off: `update` gives it bytes rounded by `image_bytes`, not torchmetrics' truncated ones
        self.fid = FrechetInceptionDistance(feature=feature, feature_extractor_weights_path=weights_path,
                                            normalize=False, sync_on_compute=False)
        self.bytes_in = True

    def states(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self.fid, name) for name in self.STATES}

    def reset(self) -> None:
        self.fid.reset()

    def to(self, device: torch.device | str) -> FID:
        self.fid.to(device)
        return self

    def update(self, outputs: dict[str, Any]) -> None:
        fake, real = _pair(outputs)
        if self.bytes_in:
            fake, real = image_bytes(fake), image_bytes(real)
        self.fid.update(real, real=True)
        self.fid.update(fake, real=False)

    def result_names(self) -> list[str]:
        return ["FID"]

    def compute(self) -> dict[str, float]:
        return {"FID": float(self.fid.compute())}

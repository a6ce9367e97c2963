"""KID: the Kernel Inception Distance (Bińkowski et al., 2018) between real and generated images.

The squared MMD between the Inception features of the real and the generated images with the
polynomial kernel k(x, y) = (gamma x.y + coef)**degree (gamma = 1 / feature size by default),
unbiased, averaged over `subsets` random subsets of `subset_size` images of each set (fewer
when fewer images were evaluated); `KID` is the mean, `KID_std` the standard deviation over the
subsets. Unlike FID it is unbiased, so small evaluation sets (hundreds of images, as synthesis
validation sets often are) compare fairly. Lower is better.

The Inception weights come from `weights_path` only, checked as FID's (metrics/image.py):
`extractor` fid-inception (torch-fidelity's, fed 0..255 bytes rounded from the images, as FID) or
torchvision. Features are kept per image, not summed, so under DDP `sync` gathers every rank's
features (`framework.dist.all_gather_rows`, as SWD gathers its patches); subsets are drawn from a generator seeded by `seed`, so
one set of images always scores the same.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from framework.dist import all_gather_rows
from framework.metrics.base import Metric
from framework.metrics.image import TorchvisionInceptionFeatures, _pair, image_bytes, local_inception_weights
from framework.registry import METRICS


class FidelityInceptionFeatures(nn.Module):
    """torch-fidelity's FID Inception from a local file; images in [0, 1] given to it as bytes,
    rounded (`image_bytes`) as an 8-bit file of them holds them."""

    def __init__(self, weights_path: str, feature: int):
        super().__init__()
        from torchmetrics.image.fid import NoTrainInceptionV3

        self.network = NoTrainInceptionV3(name="inception-v3-compat", features_list=[str(feature)],
                                          feature_extractor_weights_path=weights_path)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.network(image_bytes(images)).flatten(1)


def polynomial_mmd(real: torch.Tensor, fake: torch.Tensor, degree: int, gamma: float | None, coef: float) -> torch.Tensor:
    """The unbiased squared MMD of two equal-sized feature sets (m x d each) with the polynomial kernel."""
    gamma = 1.0 / real.shape[1] if gamma is None else gamma
    k_rr = (real @ real.T * gamma + coef) ** degree
    k_ff = (fake @ fake.T * gamma + coef) ** degree
    k_rf = (real @ fake.T * gamma + coef) ** degree
    m = real.shape[0]
    within = (k_rr.sum() - k_rr.diagonal().sum() + k_ff.sum() - k_ff.diagonal().sum()) / (m * (m - 1))
    return within - 2 * k_rf.sum() / (m * m)


def kernel_inception_distance(real: torch.Tensor, fake: torch.Tensor, subsets: int, subset_size: int, degree: int = 3,
                              gamma: float | None = None, coef: float = 1.0, seed: int = 0) -> tuple[float, float]:
    """(mean, std) of the MMD over `subsets` random subsets of min(subset_size, images) of each set."""
    size = min(subset_size, real.shape[0], fake.shape[0])
    if size < 2:
        raise ValueError(f"KID needs at least 2 real and 2 generated images, got {real.shape[0]} and {fake.shape[0]}")
    generator = torch.Generator().manual_seed(seed)
    real, fake = real.double(), fake.double()
    scores = []
    for _ in range(subsets):
        pick_real = torch.randperm(real.shape[0], generator=generator)[:size].to(real.device)
        pick_fake = torch.randperm(fake.shape[0], generator=generator)[:size].to(fake.device)
        scores.append(polynomial_mmd(real[pick_real], fake[pick_fake], degree, gamma, coef))
    scores = torch.stack(scores)
    return float(scores.mean()), float(scores.std(unbiased=False))


@METRICS.register()
class KID(Metric):
    """Kernel Inception Distance of the fakes to the reals: keys `KID`, `KID_std`."""

    def __init__(self, weights_path: str | None = None, extractor: str = "fid-inception", feature: int = 2048,
                 subsets: int = 100, subset_size: int = 1000, degree: int = 3, gamma: float | None = None,
                 coef: float = 1.0, seed: int = 0):
        super().__init__()
        for name, value in (("subsets", subsets), ("subset_size", subset_size), ("degree", degree)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        weights_path = local_inception_weights(weights_path, extractor, "KID")
        self.extractor = (TorchvisionInceptionFeatures(weights_path) if extractor == "torchvision"
                          else FidelityInceptionFeatures(weights_path, feature)).eval().requires_grad_(False)
        self.subsets, self.subset_size, self.degree = subsets, subset_size, degree
        self.gamma, self.coef, self.seed = gamma, float(coef), seed
        self._features: dict[str, list[torch.Tensor]] = {"real": [], "fake": []}

    def states(self) -> dict[str, torch.Tensor]:
        return {}  # features are gathered, not summed (see sync)

    def reset(self) -> None:
        self._features = {"real": [], "fake": []}

    def to(self, device: torch.device | str) -> KID:
        self.extractor.to(device)
        return self

    @torch.no_grad()
    def update(self, outputs: dict[str, Any]) -> None:
        fake, real = _pair(outputs)
        self.extractor.to(real.device)
        self._features["real"].append(self.extractor(real).float())
        self._features["fake"].append(self.extractor(fake).float())

    def sync(self, all_reduce) -> None:
        for role, batches in self._features.items():
            if batches:
                self._features[role] = [all_gather_rows(torch.cat(batches))]

    def result_names(self) -> list[str]:
        return ["KID", "KID_std"]

    def compute(self) -> dict[str, float]:
        if not self._features["real"]:
            raise ValueError("KID: no images were evaluated")
        real, fake = torch.cat(self._features["real"]), torch.cat(self._features["fake"])
        mean, std = kernel_inception_distance(real, fake, self.subsets, self.subset_size, self.degree, self.gamma,
                                              self.coef, self.seed)
        return {"KID": mean, "KID_std": std}

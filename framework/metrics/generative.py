"""Quality measures of generated images that need no downloaded network: the sliced
Wasserstein distance between Laplacian-pyramid patches (SWD, Karras et al. 2018) and the
MS-SSIM diversity of samples (Odena et al. 2017). They read `outputs["fake"]` and
`outputs["real"]` (N x C x H x W floats in [0, 1], what GANTask.val_step returns).

SWD: each image's Laplacian pyramid (5x5 binomial filter, mirrored borders, down to
`min_resolution`), `descriptors_per_image` random 7x7 patches per level, normalised per
channel over each set (real, fake; the patches at the same positions in both), then the sliced Wasserstein-1 distance: the mean over
random unit directions of the mean |sorted projections of real - sorted projections of fake|,
averaged over `repeats` draws of `directions` directions. Reported x 1000 per level
(`SWD_<side>`) and averaged over the levels (`SWD`); lower is better. Patch positions and
directions come from generators seeded by `seed`, so one set of images always scores the same.
Under DDP the patches of every rank are gathered (the distance is not a sum over samples).

MS-SSIM diversity: the mean MS-SSIM (torchmetrics) between consecutive pairs of images in each
batch (0-1, 2-3, ...), of the fakes (`MS-SSIM_fake`) and of the reals (`MS-SSIM_real`, the
data's own diversity to compare with); lower is more diverse, a fake value well above the
real one signals mode collapse. A sum and a count per set: exact under DDP. torchmetrics sizes
its Gaussian window from sigma (2 x int(3.5 sigma + 0.5) + 1: 11 pixels for the standard 1.5),
so `kernel_size`, if given, must be that size.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from framework.dist import all_gather_rows
from framework.metrics.base import Metric
from framework.metrics.image import _pair
from framework.registry import METRICS

BINOMIAL_5 = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16


def _blur(images: torch.Tensor) -> torch.Tensor:
    """5x5 binomial filter per channel with mirrored borders (scipy's mode='mirror')."""
    channels = images.shape[1]
    kernel = (BINOMIAL_5[:, None] * BINOMIAL_5[None, :]).to(images).expand(channels, 1, 5, 5)
    return F.conv2d(F.pad(images, (2, 2, 2, 2), mode="reflect"), kernel, groups=channels)


def _upsample(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """To `size` (the level `images` was subsampled from, ceil(size / 2) -> size): zeros between
    the pixels, then the blur x 4 (the inverse of blur-and-subsample). An odd side gets no zeros
    past its last pixel, so any image size works, not only powers of two."""
    spread = images.new_zeros(*images.shape[:2], *size)
    spread[:, :, ::2, ::2] = images
    return _blur(spread) * 4


def laplacian_pyramid(images: torch.Tensor, levels: int) -> list[torch.Tensor]:
    """[band-pass at full size, ..., at 1/2^(levels-2), low-pass at 1/2^(levels-1)]; summing
    each band with the upsampled next level rebuilds the image exactly."""
    pyramid, current = [], images
    for _ in range(levels - 1):
        smaller = _blur(current)[:, :, ::2, ::2]
        pyramid.append(current - _upsample(smaller, current.shape[-2:]))
        current = smaller
    pyramid.append(current)
    return pyramid


def patch_positions(level: torch.Tensor, count: int, generator: torch.Generator,
                    size: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols), N x count each: the top-left corners of `count` random patches per image."""
    n, _, h, w = level.shape
    rows = torch.randint(0, h - size + 1, (n, count), generator=generator)
    cols = torch.randint(0, w - size + 1, (n, count), generator=generator)
    return rows.to(level.device), cols.to(level.device)


def patches_at(level: torch.Tensor, positions: tuple[torch.Tensor, torch.Tensor], size: int = 7) -> torch.Tensor:
    """The size x size patches at `positions`, flattened: (N * count) x (C * size^2)."""
    rows, cols = positions
    n, c = level.shape[:2]
    patches = level.unfold(2, size, 1).unfold(3, size, 1)  # N x C x H' x W' x size x size
    picked = patches[torch.arange(n, device=level.device)[:, None], :, rows, cols]  # N x count x C x size x size
    return picked.reshape(-1, c * size * size)


def normalise_per_channel(descriptors: torch.Tensor, channels: int) -> torch.Tensor:
    """Each colour channel's values (over all patches and pixels) to mean 0, std 1."""
    by_channel = descriptors.view(descriptors.shape[0], channels, -1)
    mean = by_channel.mean(dim=(0, 2), keepdim=True)
    std = by_channel.std(dim=(0, 2), keepdim=True)
    return ((by_channel - mean) / std).view_as(descriptors)


def sliced_wasserstein(a: torch.Tensor, b: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Mean over the directions (D x dim, unit rows) of the Wasserstein-1 distance between the
    projections of the equal-sized point sets a and b."""
    # Sorted along the rows of a contiguous directions x points matrix: the same values as a
    # sort along dim 0 of points x directions, 3x faster on a CPU (a strided sort otherwise).
    projected_a = torch.sort((a @ directions.T).T.contiguous(), dim=1).values
    projected_b = torch.sort((b @ directions.T).T.contiguous(), dim=1).values
    return (projected_a - projected_b).abs().mean()


@METRICS.register()
class SWD(Metric):
    def __init__(self, descriptors_per_image: int = 128, min_resolution: int = 16, directions: int = 512,
                 repeats: int = 4, seed: int = 0):
        super().__init__()
        for name, value in (("descriptors_per_image", descriptors_per_image), ("min_resolution", min_resolution),
                            ("directions", directions), ("repeats", repeats)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if min_resolution < 7:
            raise ValueError(f"min_resolution must be at least the patch size 7, got {min_resolution}")
        self.descriptors_per_image, self.min_resolution = descriptors_per_image, min_resolution
        self.num_directions, self.repeats, self.seed = directions, repeats, seed
        self.reset()

    def reset(self) -> None:
        self._patches: dict[str, list[list[torch.Tensor]]] = {"real": [], "fake": []}
        self._generator = torch.Generator().manual_seed(self.seed)
        self._sides: list[int] = []

    def states(self) -> dict[str, torch.Tensor]:
        return {}

    def to(self, device) -> SWD:
        return self

    def levels_for(self, side: int) -> int:
        levels = 1
        while side // 2 ** levels >= self.min_resolution:
            levels += 1
        return levels

    def check_image_size(self, height: int, width: int) -> None:
        if min(height, width) < self.min_resolution:
            raise ValueError(f"SWD: images of {(height, width)} are smaller than min_resolution {self.min_resolution}")

    def update(self, outputs: dict[str, Any]) -> None:
        fake, real = _pair(outputs)
        self.check_image_size(*real.shape[-2:])
        side = min(real.shape[-2:])
        levels = self.levels_for(side)
        # The same patch positions in the real and the fake images: less noise between runs.
        real_pyramid, fake_pyramid = laplacian_pyramid(real, levels), laplacian_pyramid(fake, levels)
        self._sides = [min(level.shape[-2:]) for level in real_pyramid]  # 70 -> 70, 35, 18
        real_patches, fake_patches = [], []
        for real_level, fake_level in zip(real_pyramid, fake_pyramid):
            positions = patch_positions(real_level, self.descriptors_per_image, self._generator)
            real_patches.append(patches_at(real_level, positions))
            fake_patches.append(patches_at(fake_level, positions))
        self._patches["real"].append(real_patches)
        self._patches["fake"].append(fake_patches)

    def sync(self, all_reduce) -> None:
        for role, batches in self._patches.items():
            if batches:
                levels = [torch.cat([batch[level] for batch in batches]) for level in range(len(batches[0]))]
                self._patches[role] = [[all_gather_rows(level) for level in levels]]

    def compute(self) -> dict[str, float]:
        if not self._patches["real"]:
            raise ValueError("SWD: no images were evaluated")
        real = [torch.cat(level) for level in zip(*self._patches["real"])]
        fake = [torch.cat(level) for level in zip(*self._patches["fake"])]
        generator = torch.Generator().manual_seed(self.seed + 1)
        results = {}
        for side, real_level, fake_level in zip(self._sides, real, fake):
            channels = real_level.shape[1] // 49
            real_level, fake_level = normalise_per_channel(real_level, channels), normalise_per_channel(fake_level,
                                                                                                      channels)
            distances = []
            for _ in range(self.repeats):
                directions = torch.randn(self.num_directions, real_level.shape[1], generator=generator)
                directions = (directions / directions.norm(dim=1, keepdim=True)).to(real_level)
                distances.append(sliced_wasserstein(real_level, fake_level, directions))
            results[f"SWD_{side}"] = float(torch.stack(distances).mean()) * 1e3
        results["SWD"] = sum(results.values()) / len(results)
        return results


def gaussian_window(sigma: float) -> int:
    """The side of the Gaussian window torchmetrics' SSIM uses for `sigma` (it ignores kernel_size)."""
    return int(3.5 * sigma + 0.5) * 2 + 1


@METRICS.register("MS-SSIM")
class MSSSIMDiversity(Metric):
    def __init__(self, sigma: float = 1.5, betas: list[float] | tuple[float, ...] = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333),
                 kernel_size: int | None = None):
        super().__init__()
        if not sigma > 0:
            raise ValueError(f"sigma must be positive, got {sigma}")
        if not betas:
            raise ValueError("betas: one weight per scale, at least one")
        self.kernel_size, self.sigma, self.betas = gaussian_window(sigma), sigma, tuple(float(b) for b in betas)
        if kernel_size is not None and kernel_size != self.kernel_size:
            raise ValueError(f"kernel_size {kernel_size} is not the window of sigma {sigma}: torchmetrics sizes the "
                             f"Gaussian window from sigma (2 x int(3.5 sigma + 0.5) + 1 = {self.kernel_size}); leave "
                             "kernel_size out and set sigma (0.8 for a 7-pixel window, 1.5 for 11)")
        for role in ("fake", "real"):
            self.add_state(f"{role}_total", torch.zeros((), dtype=torch.float64))
            self.add_state(f"{role}_count", torch.zeros((), dtype=torch.int64))

    def fits(self, side: int) -> bool:
        """Whether torchmetrics computes MS-SSIM on images `side` pixels a side: its own checks,
        and the window's reflected border at every scale (each halves the side)."""
        scales, pad = len(self.betas), (self.kernel_size - 1) // 2
        return (side >= 2**scales and side // max(1, scales - 1) ** 2 > self.kernel_size - 1
                and all(side // 2**scale > pad for scale in range(scales)))

    def min_side(self) -> int:
        return next(side for side in range(1, 2**20) if self.fits(side))

    def check_image_size(self, height: int, width: int) -> None:
        if not self.fits(min(height, width)):
            raise ValueError(f"MS-SSIM: images of {(height, width)} are too small for {len(self.betas)} scales with "
                             f"sigma {self.sigma} (a {self.kernel_size}-pixel window): at least {self.min_side()} "
                             "pixels a side; give fewer betas or a smaller sigma")

    def pairwise(self, images: torch.Tensor) -> torch.Tensor:
        from torchmetrics.functional.image import multiscale_structural_similarity_index_measure

        self.check_image_size(*images.shape[-2:])
        pairs = images.shape[0] // 2
        first, second = images[0:2 * pairs:2], images[1:2 * pairs:2]
        return multiscale_structural_similarity_index_measure(
            first, second, kernel_size=self.kernel_size, sigma=self.sigma, betas=self.betas, data_range=1.0,
            reduction="none")

    def update(self, outputs: dict[str, Any]) -> None:
        fake, real = _pair(outputs)
        self.to(real.device)
        for role, images in (("fake", fake), ("real", real)):
            if images.shape[0] < 2:
                continue
            values = self.pairwise(images)
            setattr(self, f"{role}_total", getattr(self, f"{role}_total") + values.double().sum())
            setattr(self, f"{role}_count", getattr(self, f"{role}_count") + values.shape[0])

    def compute(self) -> dict[str, float]:
        if int(self.fake_count) == 0:
            raise ValueError("MS-SSIM: no pair of images was evaluated (batches of at least 2 images are needed)")
        return {f"MS-SSIM_{role}": float(getattr(self, f"{role}_total") / getattr(self, f"{role}_count"))
                for role in ("fake", "real")}

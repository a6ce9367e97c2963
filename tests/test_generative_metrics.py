"""SWD and MS-SSIM diversity against hand computations (numpy/scipy for SWD, torchmetrics
pair by pair for MS-SSIM)."""

import numpy as np
import pytest
import torch
from scipy.ndimage import convolve
from scipy.stats import wasserstein_distance
from torchmetrics.functional.image import multiscale_structural_similarity_index_measure

import framework  # noqa: F401
from framework.errors import ConfigError
from framework.metrics.generative import laplacian_pyramid
from framework.registry import METRICS

KERNEL = np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]) / 256.0


def blur(image):  # C x H x W, scipy's mirrored borders
    return np.stack([convolve(channel, KERNEL, mode="mirror") for channel in image])


def hand_pyramid(image, levels):
    pyramid, current = [], image
    for _ in range(levels - 1):
        smaller = blur(current)[:, ::2, ::2]
        spread = np.zeros_like(current)
        spread[:, ::2, ::2] = smaller
        pyramid.append(current - 4 * blur(spread))
        current = smaller
    return pyramid + [current]


def hand_swd(batches, per_image, directions, repeats, seed, levels):
    """The same random patch positions and directions as the metric draws (same seeded
    generators, same order: per batch, per level; the same positions in real and fake),
    everything else by hand."""
    positions = torch.Generator().manual_seed(seed)
    sets = {"real": [[] for _ in range(levels)], "fake": [[] for _ in range(levels)]}
    for real, fake in batches:
        pyramids = {role: [hand_pyramid(image, levels) for image in images.numpy().astype(np.float64)]
                    for role, images in (("real", real), ("fake", fake))}
        for level in range(levels):
            h, w = pyramids["real"][0][level].shape[1:]
            rows = torch.randint(0, h - 6, (len(real), per_image), generator=positions)
            cols = torch.randint(0, w - 6, (len(real), per_image), generator=positions)
            for role in ("real", "fake"):
                sets[role][level] += [pyramids[role][i][level][:, r:r + 7, c:c + 7].reshape(-1)
                                      for i in range(len(real)) for r, c in zip(rows[i].tolist(), cols[i].tolist())]
    sets = {role: [np.stack(level) for level in levels_] for role, levels_ in sets.items()}
    side = batches[0][0].shape[-1]
    draws = torch.Generator().manual_seed(seed + 1)
    results = {}
    for level in range(levels):
        normalised = []
        for role in ("real", "fake"):
            by_channel = sets[role][level].reshape(len(sets[role][level]), 3, 49)
            mean, std = by_channel.mean(axis=(0, 2), keepdims=True), by_channel.std(axis=(0, 2), ddof=1, keepdims=True)
            normalised.append(((by_channel - mean) / std).reshape(len(by_channel), -1))
        distances = []
        for _ in range(repeats):
            dirs = torch.randn(directions, 147, generator=draws).numpy().astype(np.float64)
            dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
            distances.append(np.mean([wasserstein_distance(normalised[0] @ d, normalised[1] @ d) for d in dirs]))
        results[f"SWD_{side // 2**level}"] = np.mean(distances) * 1e3
    results["SWD"] = np.mean(list(results.values()))
    return results


def test_swd_equals_the_hand_computation():
    torch.manual_seed(0)
    real = torch.rand(5, 3, 32, 32)
    fake = (real.flip(0) * 0.7 + 0.3 * torch.rand(5, 3, 32, 32)).clamp(0, 1)
    metric = METRICS.build({"type": "SWD", "descriptors_per_image": 8, "directions": 16, "repeats": 2, "seed": 4})
    metric.reset()
    metric.update({"real": real[:3], "fake": fake[:3]})  # two batches: states concatenate
    metric.update({"real": real[3:], "fake": fake[3:]})
    metric.sync(lambda t: None)
    values = metric.compute()
    expected = hand_swd([(real[:3], fake[:3]), (real[3:], fake[3:])], 8, 16, 2, 4, levels=2)
    assert values.keys() == expected.keys() == {"SWD", "SWD_32", "SWD_16"}
    for key in expected:
        assert values[key] == pytest.approx(expected[key], rel=1e-4), key


def test_swd_is_zero_for_the_same_images_and_grows_with_noise():
    torch.manual_seed(0)
    real = torch.rand(4, 3, 32, 32)
    values = []
    for noise in (0.0, 0.3):
        metric = METRICS.build({"type": "SWD", "descriptors_per_image": 16, "directions": 32, "repeats": 1})
        fake = (real + noise * torch.randn_like(real)).clamp(0, 1)
        metric.update({"real": real, "fake": fake})
        values.append(metric.compute()["SWD"])
    assert values[0] == pytest.approx(0.0, abs=1e-6) and values[1] > 10


def test_laplacian_pyramid_matches_scipy_and_rebuilds_the_image():
    image = torch.rand(1, 3, 32, 32, dtype=torch.float64)
    ours = laplacian_pyramid(image, 3)
    for level, expected in zip(ours, hand_pyramid(image[0].numpy(), 3)):
        np.testing.assert_allclose(level[0].numpy(), expected, atol=1e-12)


def test_ms_ssim_diversity_is_the_mean_over_consecutive_pairs():
    torch.manual_seed(0)
    fake, real = torch.rand(5, 3, 48, 48), torch.rand(4, 3, 48, 48)
    real[1] = real[0]  # an identical pair has MS-SSIM 1
    metric = METRICS.build({"type": "MS-SSIM", "betas": [0.3, 0.4, 0.3]})
    metric.reset()
    metric.update({"fake": fake[:4], "real": real})
    metric.update({"fake": fake[2:], "real": real[:3]})  # odd batch: the last image pairs with none
    metric.sync(lambda t: None)
    values = metric.compute()

    def pair(a, b):
        return float(multiscale_structural_similarity_index_measure(a[None], b[None], data_range=1.0,
                                                                    betas=(0.3, 0.4, 0.3)))

    fakes = [pair(fake[0], fake[1]), pair(fake[2], fake[3]), pair(fake[2], fake[3])]
    reals = [pair(real[0], real[1]), pair(real[2], real[3]), pair(real[0], real[1])]
    assert values["MS-SSIM_fake"] == pytest.approx(np.mean(fakes), rel=1e-5)
    assert values["MS-SSIM_real"] == pytest.approx(np.mean(reals), rel=1e-5)
    assert pair(real[0], real[1]) == pytest.approx(1.0)


def test_ms_ssim_names_images_too_small_for_its_scales():
    metric = METRICS.build({"type": "MS-SSIM"})
    with pytest.raises(ValueError, match=r"at least 161 pixels a side\); give fewer betas"):
        metric.update({"fake": torch.rand(2, 3, 32, 32), "real": torch.rand(2, 3, 32, 32)})
    with pytest.raises(ConfigError, match="descriptors_per_image must be a positive integer"):
        METRICS.build({"type": "SWD", "descriptors_per_image": 0}, path="metrics[0]")

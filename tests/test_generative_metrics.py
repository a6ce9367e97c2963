"""SWD and MS-SSIM diversity against hand computations (numpy/scipy for SWD, torchmetrics
pair by pair for MS-SSIM)."""

import json

import numpy as np
import pytest
import torch
from scipy.ndimage import convolve
from scipy.stats import wasserstein_distance
from torchmetrics.functional.image import multiscale_structural_similarity_index_measure

import framework  # noqa: F401
from framework.errors import ConfigError
from framework.metrics.base import check_metrics_fit_images
from framework.metrics.generative import laplacian_pyramid
from framework.registry import METRICS
from support import REPO, call_tool, run_forked_ranks

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


def hand_swd(batches, per_image, directions, repeats, seed, levels, ranks=None):
    """The same random patch positions and directions as the metric draws (same seeded
    generators, same order: per batch, per level; the same positions in real and fake),
    everything else by hand. `ranks`: the batches are split over processes, `ranks[i]` the
    rank of batch i (in rank order), each drawing positions from its own generator."""
    ranks = [0] * len(batches) if ranks is None else ranks
    sets = {"real": [[] for _ in range(levels)], "fake": [[] for _ in range(levels)]}
    for i, (real, fake) in enumerate(batches):
        if i == 0 or ranks[i] != ranks[i - 1]:
            positions = torch.Generator().manual_seed(seed)
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
    sides = [min(level.shape[1:]) for level in pyramids["real"][0]]
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
        results[f"SWD_{sides[level]}"] = np.mean(distances) * 1e3
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


@pytest.mark.parametrize("size", [(32, 32), (70, 70), (70, 76), (35, 37)])
def test_laplacian_pyramid_matches_scipy_and_rebuilds_the_image(size):
    """Odd sides included: SWD crashed on 70x70 images (a 35-pixel band against an upsampled 36)."""
    image = torch.rand(1, 3, *size, dtype=torch.float64)
    ours = laplacian_pyramid(image, 3)
    for level, expected in zip(ours, hand_pyramid(image[0].numpy(), 3)):
        np.testing.assert_allclose(level[0].numpy(), expected, atol=1e-12)
    rebuilt = torch.from_numpy(hand_pyramid(image[0].numpy(), 3)[2])
    for band in reversed(ours[:2]):  # each band plus the next level upsampled by hand gives the level back
        spread = np.zeros(band.shape[1:])
        spread[:, ::2, ::2] = rebuilt.numpy()
        rebuilt = band[0] + torch.from_numpy(4 * blur(spread))
    torch.testing.assert_close(rebuilt, image[0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("size, names", [((70, 76), {"SWD_70", "SWD_35", "SWD_18"}), ((24, 40), {"SWD_24"})])
def test_swd_of_any_image_size_equals_the_hand_computation(size, names):
    """Levels down to min_resolution 16 (the default), named by their smaller side."""
    torch.manual_seed(1)
    real = torch.rand(3, 3, *size)
    fake = (real * 0.5 + 0.5 * torch.rand(3, 3, *size)).clamp(0, 1)
    metric = METRICS.build({"type": "SWD", "descriptors_per_image": 8, "directions": 16, "repeats": 2})
    metric.update({"real": real, "fake": fake})
    values = metric.compute()
    expected = hand_swd([(real, fake)], 8, 16, 2, 0, levels=len(names))
    assert values.keys() == expected.keys() == names | {"SWD"}
    for key in expected:
        assert values[key] == pytest.approx(expected[key], rel=1e-4), key


def test_swd_defaults_are_128_patches_512_directions_4_repeats_seed_0():
    torch.manual_seed(2)
    real = torch.rand(2, 3, 32, 32)
    fake = (real * 0.6 + 0.4 * torch.rand(2, 3, 32, 32)).clamp(0, 1)
    metric = METRICS.build({"type": "SWD"})
    metric.update({"real": real, "fake": fake})
    values = metric.compute()
    expected = hand_swd([(real, fake)], 128, 512, 4, 0, levels=2)
    for key in expected:
        assert values[key] == pytest.approx(expected[key], rel=1e-4), key


def test_swd_and_ms_ssim_under_ddp_equal_the_hand_computation_over_every_rank(tmp_path):
    """Two gloo ranks with 3 and 2 images: SWD gathers every rank's patches (unequal counts),
    MS-SSIM sums its pairs; every rank reports the same values."""
    result = run_forked_ranks(2, str(REPO / "tests/scripts/generative_metrics_ddp.py"), tmp_path,
                              folder=tmp_path / "out", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1]
    generator = torch.Generator().manual_seed(0)  # the script's images
    real = torch.rand(5, 3, 48, 48, generator=generator)
    fake = (real.flip(0) * 0.7 + 0.3 * torch.rand(5, 3, 48, 48, generator=generator)).clamp(0, 1)
    batches = [(real[0:2], fake[0:2]), (real[2:3], fake[2:3]), (real[3:5], fake[3:5])]
    expected = hand_swd(batches, 8, 16, 2, 4, levels=2, ranks=[0, 0, 1])
    for key in expected:
        assert ranks[0][key] == pytest.approx(expected[key], rel=1e-4), key

    def pair(a, b):
        return float(multiscale_structural_similarity_index_measure(a[None], b[None], data_range=1.0,
                                                                    betas=(0.3, 0.4, 0.3)))

    # rank 0: pair 0-1 of its first batch, none of its one-image batch; rank 1: pair 3-4
    assert ranks[0]["MS-SSIM_real"] == pytest.approx(np.mean([pair(real[0], real[1]), pair(real[3], real[4])]),
                                                     rel=1e-5)
    assert ranks[0]["MS-SSIM_fake"] == pytest.approx(np.mean([pair(fake[0], fake[1]), pair(fake[3], fake[4])]),
                                                     rel=1e-5)


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
    with pytest.raises(ValueError, match=r"^MS-SSIM: images of \(32, 32\) are too small for 5 scales with sigma 1\.5 "
                                         r"\(a 11-pixel window\): at least 176 pixels a side; give fewer betas or a "
                                         r"smaller sigma$"):
        metric.update({"fake": torch.rand(2, 3, 32, 32), "real": torch.rand(2, 3, 32, 32)})
    with pytest.raises(ConfigError, match="descriptors_per_image must be a positive integer"):
        METRICS.build({"type": "SWD", "descriptors_per_image": 0}, path="metrics[0]")


def test_ms_ssim_passes_its_window_on_and_counts_each_set_apart():
    """sigma reaches torchmetrics (a 7-pixel window for 0.8); a batch of one image adds no pair;
    the sums are float64 (equal to the pairs' mean to 1e-12)."""
    torch.manual_seed(3)
    fake, real = torch.rand(5, 3, 40, 40), torch.rand(5, 3, 40, 40)
    metric = METRICS.build({"type": "MS-SSIM", "kernel_size": 7, "sigma": 0.8, "betas": [0.5, 0.5]})
    metric.update({"fake": fake[:1], "real": real[:1]})  # one image: no pair
    metric.update({"fake": fake[1:3], "real": real[1:3]})
    metric.update({"fake": fake[3:], "real": real[3:]})
    values = metric.compute()

    def pair(a, b):
        return multiscale_structural_similarity_index_measure(a[None], b[None], kernel_size=7, sigma=0.8,
                                                              betas=(0.5, 0.5), data_range=1.0).double()

    for role, images in (("fake", fake), ("real", real)):
        expected = float((pair(images[1], images[2]) + pair(images[3], images[4])) / 2)
        assert values[f"MS-SSIM_{role}"] == pytest.approx(expected, rel=1e-12, abs=0), role
    default = METRICS.build({"type": "MS-SSIM", "betas": [0.5, 0.5]})
    default.update({"fake": fake[:2], "real": real[:2]})
    assert default.compute()["MS-SSIM_fake"] != pytest.approx(values["MS-SSIM_fake"], rel=1e-3)


def test_generative_metric_settings_and_inputs_are_checked_with_one_message():
    def refused(node, message):
        with pytest.raises(ConfigError, match=rf"^metrics\[0\] \({node['type']}\): {message}$"):
            METRICS.build(node, path="metrics[0]")

    for name in ("descriptors_per_image", "min_resolution", "directions", "repeats"):
        refused({"type": "SWD", name: 0}, rf"{name} must be a positive integer, got 0")
    refused({"type": "SWD", "min_resolution": 6}, r"min_resolution must be at least the patch size 7, got 6")
    # torchmetrics sizes its Gaussian window from sigma: a kernel_size it would ignore is refused
    refused({"type": "MS-SSIM", "kernel_size": 7}, r"kernel_size 7 is not the window of sigma 1\.5: torchmetrics sizes "
            r"the Gaussian window from sigma \(2 x int\(3\.5 sigma \+ 0\.5\) \+ 1 = 11\); leave kernel_size out and "
            r"set sigma \(0\.8 for a 7-pixel window, 1\.5 for 11\)")
    refused({"type": "MS-SSIM", "sigma": 0}, r"sigma must be positive, got 0")
    refused({"type": "MS-SSIM", "betas": []}, r"betas: one weight per scale, at least one")
    METRICS.build({"type": "SWD", "min_resolution": 7})  # the patch size itself is fine
    METRICS.build({"type": "MS-SSIM", "kernel_size": 11})  # the standard window, as configs wrote it

    swd = METRICS.build({"type": "SWD", "min_resolution": 16, "descriptors_per_image": 2, "directions": 2})
    with pytest.raises(ValueError, match=r"^SWD: no images were evaluated$"):
        swd.compute()
    with pytest.raises(ValueError, match=r"^SWD: images of \(15, 40\) are smaller than min_resolution 16$"):
        swd.update({"real": torch.rand(2, 3, 15, 40), "fake": torch.rand(2, 3, 15, 40)})
    swd.update({"real": torch.rand(2, 3, 16, 40), "fake": torch.rand(2, 3, 16, 40)})  # exactly min_resolution
    assert set(swd.compute()) == {"SWD_16", "SWD"}

    ms_ssim = METRICS.build({"type": "MS-SSIM", "sigma": 0.8, "betas": [0.5, 0.5]})  # at least 8 pixels a side
    with pytest.raises(ValueError, match=r"^MS-SSIM: images of \(7, 9\) are too small for 2 scales with sigma 0\.8 "
                                         r"\(a 7-pixel window\): at least 8 pixels a side; give fewer betas or a "
                                         r"smaller sigma$"):
        ms_ssim.update({"fake": torch.rand(2, 3, 7, 9), "real": torch.rand(2, 3, 7, 9)})
    ms_ssim.update({"fake": torch.rand(1, 3, 8, 9), "real": torch.rand(1, 3, 8, 9)})  # no pair in a batch of one
    with pytest.raises(ValueError, match=r"^MS-SSIM: no pair of images was evaluated \(batches of at least 2 "
                                         r"images are needed\)$"):
        ms_ssim.compute()
    ms_ssim.update({"fake": torch.rand(2, 3, 8, 9), "real": torch.rand(2, 3, 8, 9)})  # 8 a side is enough
    assert 0 <= ms_ssim.compute()["MS-SSIM_fake"] <= 1


@pytest.mark.parametrize("sigma, betas", [(1.5, (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)), (1.5, (0.3, 0.4, 0.3)),
                                          (0.8, (0.5, 0.5)), (2.0, (0.25,) * 4), (0.1, (0.3, 0.4, 0.3))])
def test_ms_ssim_min_side_is_where_torchmetrics_starts_to_compute(sigma, betas):
    """Below it the metric refuses in its own words; from it on torchmetrics computes."""
    metric = METRICS.build({"type": "MS-SSIM", "sigma": sigma, "betas": list(betas)})
    side = metric.min_side()
    image = torch.rand(1, 3, side, side + 3)
    multiscale_structural_similarity_index_measure(image, image.flip(3), sigma=sigma, betas=betas,
                                                   kernel_size=metric.kernel_size, data_range=1.0)
    with pytest.raises((ValueError, RuntimeError)):  # its own check, or the reflected border's
        multiscale_structural_similarity_index_measure(image[..., :-1, :], image[..., :-1, :].flip(3), sigma=sigma,
                                                       betas=betas, kernel_size=metric.kernel_size, data_range=1.0)
    with pytest.raises(ValueError, match=rf"at least {side} pixels a side"):
        metric.update({"fake": torch.rand(2, 3, side - 1, side + 3), "real": torch.rand(2, 3, side - 1, side + 3)})


def test_a_metric_that_cannot_take_the_validation_images_is_refused_before_training(tmp_path):
    """MS-SSIM's five scales on DCGAN's 32x32 images: refused at start-up, before anything is
    written, not at the first evaluation after an interval of training."""
    work_dir = tmp_path / "run"
    result = call_tool("train", "--config", REPO / "projects/dcgan/configs/dcgan_shapes.yaml", "--work-dir", work_dir,
                       "train.max_iters=4", "train.val_interval=2", "metrics=[{type: PSNR}, {type: MS-SSIM}]")
    assert result.returncode == 2
    assert result.stderr == ("error: metrics[1]: MS-SSIM: images of (32, 32) are too small for 5 scales with sigma 1.5 "
                             "(a 11-pixel window): at least 176 pixels a side; give fewer betas or a smaller sigma "
                             "(data.val.dataset[0] is 32x32 after its pipeline)\n")
    assert sorted(p.name for p in work_dir.iterdir()) == ["train.log"]


class _Sized(torch.utils.data.Dataset):
    def __init__(self, reads):
        self.reads = reads

    def __len__(self):
        return 3

    def __getitem__(self, index):
        self.reads.append(index)
        return {"a": torch.zeros(3, 20, 40), "b": torch.zeros(3, 16, 50), "mask": torch.zeros(8, 8), "name": "x"}


def test_the_first_sample_is_read_only_for_a_metric_with_a_size_limit_and_every_image_size_checked():
    reads = []
    check_metrics_fit_images([METRICS.build({"type": "PSNR"})], _Sized(reads), "data.val.dataset")
    assert reads == []  # no limit: nothing read
    check_metrics_fit_images([METRICS.build({"type": "SWD", "min_resolution": 16})], _Sized(reads), "data.val.dataset")
    assert reads == [0]  # both images at least 16 a side; the 8x8 mask is no image
    tuples = [(torch.zeros(3, 4, 4), torch.zeros(4, 4))]  # a custom dataset of tuples: left to the evaluation
    check_metrics_fit_images([METRICS.build({"type": "SWD", "min_resolution": 16})], tuples, "data.val.dataset")
    with pytest.raises(ConfigError, match=r"^metrics\[1\]: SWD: images of \(16, 50\) are smaller than min_resolution "
                                          r"17 \(data\.val\.dataset\[0\] is 16x50 after its pipeline\)$"):
        check_metrics_fit_images([METRICS.build({"type": "PSNR"}), METRICS.build({"type": "SWD", "min_resolution": 17})],
                                 _Sized(reads), "data.val.dataset")

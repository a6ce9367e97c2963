"""KID (framework/metrics/kid.py): the kernel MMD by hand and against torchmetrics, the metric on
torch-fidelity's Inception from a local file, and its settings' messages."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn
from torchmetrics.image.kid import KernelInceptionDistance

from framework.errors import ConfigError
from framework.metrics import FID
from framework.metrics.image import image_bytes
from framework.metrics.kid import KID, kernel_inception_distance, polynomial_mmd
from framework.registry import METRICS


def test_polynomial_mmd_by_hand():
    real = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=torch.float64)
    fake = torch.tensor([[0.5, 0.5], [2.0, 0.0], [0.0, 0.0]], dtype=torch.float64)

    def k(a, b):
        return (sum(x * y for x, y in zip(a, b)) / 2 + 1) ** 3  # gamma = 1 / d, coef 1, degree 3

    r, f = real.tolist(), fake.tolist()
    within = sum(k(r[i], r[j]) + k(f[i], f[j]) for i in range(3) for j in range(3) if i != j) / 6
    across = sum(k(r[i], f[j]) for i in range(3) for j in range(3)) / 9
    assert polynomial_mmd(real, fake, 3, None, 1.0).item() == pytest.approx(within - 2 * across)


def test_kid_equals_torchmetrics_on_whole_sets_of_features():
    generator = torch.Generator().manual_seed(0)
    real = torch.randn(30, 8, generator=generator)
    fake = torch.randn(30, 8, generator=generator) * 1.3 + 0.4
    reference = KernelInceptionDistance(feature=nn.Flatten(), subsets=1, subset_size=30)
    reference.update(real, real=True)
    reference.update(fake, real=False)
    expected_mean, _ = reference.compute()
    mean, std = kernel_inception_distance(real, fake, subsets=1, subset_size=30)
    assert mean == pytest.approx(expected_mean.item(), rel=1e-5) and std == 0.0
    # Subsets smaller than the sets: seeded, so the same images score the same.
    assert kernel_inception_distance(real, fake, 10, 12, seed=3) == kernel_inception_distance(real, fake, 10, 12, seed=3)
    assert kernel_inception_distance(real, fake, 10, 12, seed=3)[1] > 0
    alike, _ = kernel_inception_distance(real, torch.randn(30, 8, generator=generator), subsets=1, subset_size=30)
    assert abs(alike) < 0.25 * mean  # another draw of the same distribution
    with pytest.raises(ValueError, match="KID needs at least 2 real and 2 generated images, got 1 and 30"):
        kernel_inception_distance(real[:1], fake, 1, 30)


def test_subsets_smaller_than_the_sets_are_drawn_with_the_seed_given():
    """Which 5 of 30 images make a subset is the seed's draw: four seeds, four scores; subsets of
    all 30 are the whole sets whatever the seed, the unbiased MMD of the sets themselves."""
    generator = torch.Generator().manual_seed(0)
    real, fake = torch.randn(30, 8, generator=generator), torch.randn(30, 8, generator=generator) + 0.5
    scores = [kernel_inception_distance(real, fake, subsets=1, subset_size=5, seed=seed)[0] for seed in range(4)]
    assert len(set(scores)) == 4
    whole = polynomial_mmd(real.double(), fake.double(), 3, None, 1.0).item()
    for seed in (0, 7):
        assert kernel_inception_distance(real, fake, subsets=1, subset_size=30, seed=seed)[0] == pytest.approx(whole)


def _fidelity_weights(tmp_path):
    """torch-fidelity's FID Inception with random weights, in its file format (as the FID test)."""
    fidelity = pytest.importorskip("torch_fidelity.feature_extractor_inceptionv3")
    extractor_class = fidelity.FeatureExtractorInceptionV3
    empty = tmp_path / "empty.pth"
    torch.save({}, empty)
    torch.manual_seed(0)
    original = extractor_class.load_state_dict
    extractor_class.load_state_dict = lambda self, state, *a, **k: None  # its random initialisation, once
    try:
        weights = extractor_class("inception-v3-compat", ["64"], feature_extractor_weights_path=str(empty)).state_dict()
    finally:
        extractor_class.load_state_dict = original
    path = tmp_path / "pt_inception-2015-12-05-6726825d.pth"
    torch.save(weights, path)
    return extractor_class("inception-v3-compat", ["64"], feature_extractor_weights_path=str(path)), path


def test_kid_metric_on_the_local_fid_inception_caps_subsets_at_the_images_evaluated(tmp_path):
    reference, path = _fidelity_weights(tmp_path)
    kid = METRICS.build({"type": "KID", "weights_path": str(path), "feature": 64, "subsets": 5}, path="metrics[0]")
    generator = torch.Generator().manual_seed(1)
    real = torch.rand(12, 3, 24, 24, generator=generator)
    fake = (real.flip(0) * 0.5 + 0.5 * torch.rand(12, 3, 24, 24, generator=generator)).clamp(0, 1)
    for part in range(3):
        kid.update({"fake": fake[part * 4:(part + 1) * 4], "real": real[part * 4:(part + 1) * 4]})
    kid.sync(lambda tensor: None)  # one process: the gathered features are this process's
    fid_inception = FID(weights_path=str(path), feature=64).fid.inception  # the features FID compares
    with torch.no_grad():
        expected = [fid_inception(image_bytes(x)) for x in (real, fake)]
        fidelity = reference(image_bytes(real))[0]
    # torchmetrics' copy of torch-fidelity's network (what FID runs), not bit for bit the same
    torch.testing.assert_close(expected[0], fidelity, atol=3e-3, rtol=0)
    values = kid.compute()
    # subset_size 1000 > 12 images: subsets of all 12, so every subset is the whole set
    mean, std = kernel_inception_distance(*expected, subsets=5, subset_size=12)
    assert values == {"KID": pytest.approx(mean, rel=1e-4), "KID_std": pytest.approx(std, abs=1e-9)}
    assert kid.result_names() == ["KID", "KID_std"]
    kid.reset()
    with pytest.raises(ValueError, match="KID: no images were evaluated"):
        kid.compute()


@pytest.mark.parametrize("node,message", [
    ({"type": "KID"}, re.escape("weights_path: KID needs a local Inception weights file and never downloads one; "
                                "set weights_path (see the FID docs) or remove the KID metric") + "$"),
    ({"type": "KID", "weights_path": "/nowhere/pt.pth"}, r"weights_path: Inception weights file not found: /nowhere/pt.pth"),
    ({"type": "KID", "weights_path": "x", "subsets": 0}, re.escape("subsets must be an integer >= 1, got 0") + "$"),
    ({"type": "KID", "weights_path": "x", "extractor": "clip"},
     re.escape("extractor: unknown 'clip' (choose one of fid-inception, torchvision)") + "$"),
])
def test_kid_settings_are_one_config_error(node, message):
    with pytest.raises(ConfigError, match=r"^metrics\[0\] \(KID\): " + message):
        METRICS.build(node, path="metrics[0]")
    assert KID.__name__ in METRICS.names()


def test_kid_and_fid_round_images_to_bytes_as_an_8_bit_file_holds_them(tmp_path):
    """0.999 / 255 is byte 1 in a PNG of the image (and so to torch-fidelity reading it), not 0:
    what each metric hands its Inception, caught on the way in, is the rounded level."""
    _, path = _fidelity_weights(tmp_path)
    levels = torch.randint(0, 255, (2, 3, 24, 24), generator=torch.Generator().manual_seed(2)).float()
    offsets = torch.tensor([0.001, 0.49, 0.51, 0.999]).repeat(2 * 3 * 24 * 6).view(2, 3, 24, 24)
    images = (levels + offsets) / 255
    expected = (levels + (offsets > 0.5).float()).to(torch.uint8)
    assert torch.equal(image_bytes(images), expected)
    assert torch.equal(image_bytes(torch.tensor([-0.1, 1.2])), torch.tensor([0, 255], dtype=torch.uint8))
    seen = []
    kid = KID(weights_path=str(path), feature=64)
    fid = FID(weights_path=str(path), feature=64)
    for network in (kid.extractor.network, fid.fid.inception):
        network.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]))
    kid.update({"fake": images, "real": images})
    fid.update({"fake": images, "real": images})
    assert len(seen) == 4
    for given in seen:
        assert torch.equal(given, expected)

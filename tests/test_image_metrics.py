"""PSNR, SSIM and L1 against torchmetrics, their sums across ranks, and FID's local-weights rule."""

import re
import sys

import pytest
import torch
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError, UserError
from framework.metrics import FID, PSNR, SSIM, L1Distance
from framework.metrics.image import image_bytes
from framework.registry import METRICS


def image_pairs(n=6, size=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    real = torch.rand(n, 3, size, size, generator=generator)
    fake = (real + 0.1 * torch.randn(real.shape, generator=generator)).clamp(0, 1)
    return fake, real


def structured_pairs(n=4, size=32, seed=0):
    """Images whose SSIM depends on the window and the constants, as uniform noise's does not: a
    smooth pattern, dark towards the left (where c1 counts), with noise growing downwards."""
    generator = torch.Generator().manual_seed(seed)
    y, x = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    phase = torch.rand(n, 3, 1, 1, generator=generator) * 6.28
    real = (0.5 + 0.45 * torch.sin(x / 3 + phase) * torch.cos(y / 5)) * (x / size)
    fake = (real + 0.2 * (y / size) * torch.randn(real.shape, generator=generator)).clamp(0, 1)
    return fake, real


def run(metric, fake, real, splits=(4,)):
    metric.reset()
    for f, r in zip(fake.tensor_split(splits), real.tensor_split(splits)):
        metric.update({"fake": f, "real": r})
    return metric.compute()


@pytest.mark.parametrize("pairs", [image_pairs, structured_pairs], ids=["noise", "structured"])
def test_psnr_ssim_l1_match_torchmetrics_over_several_batches(pairs):
    fake, real = pairs()
    psnr = PeakSignalNoiseRatio(data_range=1.0, reduction="elementwise_mean", dim=(1, 2, 3))(fake, real)
    assert run(PSNR(), fake, real)["PSNR"] == pytest.approx(psnr.item(), abs=1e-4)
    ssim = StructuralSimilarityIndexMeasure(data_range=1.0)(fake, real)
    assert run(SSIM(), fake, real)["SSIM"] == pytest.approx(ssim.item(), abs=1e-5)
    assert run(L1Distance(), fake, real)["L1"] == pytest.approx((fake - real).abs().mean().item(), abs=1e-6)


def test_identical_images_give_a_finite_psnr_and_ssim_one():
    _, real = image_pairs(n=2)
    assert run(PSNR(), real, real)["PSNR"] == pytest.approx(100.0)
    assert run(SSIM(), real, real)["SSIM"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("make", [PSNR, SSIM, L1Distance])
def test_states_summed_over_two_ranks_give_the_whole_dataset_value(make):
    fake, real = image_pairs(n=5)
    whole = run(make(), fake, real)
    rank0, rank1 = make(), make()
    run(rank0, fake[0::2], real[0::2], splits=(1,))
    run(rank1, fake[1::2], real[1::2], splits=(1,))
    others = iter(list(rank1.states().values()))
    rank0.sync(lambda state: state.add_(next(others)))  # what all_reduce(SUM) does on rank 0
    assert rank0.compute() == pytest.approx(whole, abs=1e-9)


def test_image_metrics_are_registered():
    assert {"PSNR", "SSIM", "L1", "FID"} <= set(METRICS.names())
    assert isinstance(METRICS.build({"type": "L1"}), L1Distance)


@pytest.mark.parametrize("node, message", [
    ({"type": "FID"}, re.escape("weights_path: FID needs a local Inception weights file and never downloads one; "
                                "set weights_path (see the FID docs) or remove the FID metric") + "$"),
    ({"type": "FID", "weights_path": "/nowhere/pt_inception.pth"}, r"weights_path: Inception weights file not found: /nowhere/pt_inception"),
    ({"type": "FID", "weights_path": "x", "extractor": "clip"},
     re.escape("extractor: unknown 'clip' (choose one of fid-inception, torchvision)") + "$"),
])
def test_fid_without_a_usable_local_weights_file_is_a_config_error(node, message):
    with pytest.raises(ConfigError, match=r"^metrics\[0\] \(FID\): " + message):
        METRICS.build(node, path="metrics[0]")


def test_fid_inception_without_torch_fidelity_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_fidelity", None)  # as if not installed: importing it fails
    weights = tmp_path / "pt_inception.pth"
    weights.write_bytes(b"")
    with pytest.raises(ConfigError, match=re.escape(
            "extractor fid-inception needs the torch-fidelity package, which is not installed: pip install "
            "'segan-framework[fid]' (or torch-fidelity); or use extractor: torchvision with torchvision's Inception "
            "v3 weights file") + "$"):
        METRICS.build({"type": "FID", "weights_path": str(weights)}, path="metrics[0]")


def frechet_distance(real_features, fake_features):
    """|mu_r - mu_f|^2 + tr(S_r) + tr(S_f) - 2 tr((S_r S_f)^(1/2)), in float64 (the trace of the
    root is the sum of the roots of the product's eigenvalues)."""
    real_features, fake_features = real_features.double(), fake_features.double()
    mu_r, mu_f = real_features.mean(0), fake_features.mean(0)
    cov_r, cov_f = real_features.T.cov(), fake_features.T.cov()
    root_trace = torch.linalg.eigvals(cov_r @ cov_f).sqrt().real.sum()
    return ((mu_r - mu_f).square().sum() + cov_r.trace() + cov_f.trace() - 2 * root_trace).item()


def imagenet_input(images):
    """Images in [0, 1] as torchvision's Inception v3 takes them: 299x299, ImageNet-normalised."""
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (torch.nn.functional.interpolate(images, size=(299, 299), mode="bilinear") - mean) / std


def test_fid_with_torchvision_inception_weights_from_a_local_file(tmp_path):
    from torchvision.models import inception_v3

    torch.manual_seed(0)
    # What inception_v3(weights=IMAGENET1K_V1) builds around the file's weights: transform_input on
    # (the ported weights expect [-1, 1]), fed 299x299 ImageNet-normalised images.
    reference = inception_v3(weights=None, aux_logits=True, init_weights=False, transform_input=True)
    calibration = torch.cat(structured_pairs(n=4, size=40, seed=1))
    for module in reference.modules():  # batch-norm statistics of real activations: features of order 1, not 1e-9
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # the plain average of the one pass below
    with torch.no_grad():
        reference.train()(imagenet_input(calibration))
    weights, saved = tmp_path / "inception_v3.pth", reference.state_dict()
    torch.save(saved, weights)
    reference.fc = torch.nn.Identity()
    reference.eval()
    fid = FID(weights_path=str(weights), extractor="torchvision")
    loaded = fid.fid.inception.network.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in loaded.items())  # the file's weights, nothing downloaded

    fake, real = structured_pairs(n=4, size=40)
    with torch.no_grad():
        expected = [reference(imagenet_input(x)) for x in (real, fake)]
        assert expected[0].abs().mean() > 0.1
        torch.testing.assert_close(fid.fid.inception(real), expected[0], rtol=1e-4, atol=1e-4)
    fid.fid.train()  # the Inception's batch norms stay frozen whatever asks its module to train
    assert not fid.fid.inception.network.training
    value = run(fid, fake, real, splits=(2,))["FID"]
    assert fid.result_names() == ["FID"] and value == pytest.approx(frechet_distance(*expected), rel=1e-3)
    assert int(fid.states()["real_features_num_samples"]) == 4
    # The framework sums these states across ranks itself (`sync`); torchmetrics syncing them again
    # in compute() would count every rank's images twice under DDP.
    assert fid.fid.sync_on_compute is False


def test_fid_inception_reads_the_local_weights_file_and_feeds_torch_fidelity_uint8_images(tmp_path):
    """The default extractor (torch-fidelity's FID Inception; the `.[fid]` extra): random weights
    in its file format, the 64-d features (its first layers, quick), against torch-fidelity's own
    extractor fed the images as rounded 0..255 bytes, and the Fréchet distance by hand."""
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
    reference = extractor_class("inception-v3-compat", ["64"], feature_extractor_weights_path=str(path))
    fid = METRICS.build({"type": "FID", "weights_path": str(path), "feature": 64}, path="metrics[0]")

    generator = torch.Generator().manual_seed(1)
    real = torch.rand(80, 3, 24, 24, generator=generator)  # more images than features: full-rank covariances
    fake = (real.flip(0) * 0.5 + 0.5 * torch.rand(80, 3, 24, 24, generator=generator)).clamp(0, 1)
    with torch.no_grad():
        expected = [reference(image_bytes(x))[0] for x in (real, fake)]
    assert expected[0].abs().mean() > 0.01  # three random layers: small features, far from float noise
    value = run(fid, fake, real, splits=(40,))["FID"]
    assert value == pytest.approx(frechet_distance(*expected), rel=1e-3)
    assert int(fid.states()["fake_features_num_samples"]) == 80


def test_fid_with_a_damaged_weights_file_is_one_line_naming_it(tmp_path):
    weights = tmp_path / "inception_v3.pth"
    weights.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(UserError, match=r"^metrics\[0\] \(FID\): " + re.escape(
            f"cannot load {weights}: not a PyTorch checkpoint, or a corrupt or truncated one") + "$"):
        METRICS.build({"type": "FID", "weights_path": str(weights), "extractor": "torchvision"}, path="metrics[0]")


def test_suffixed_metrics_name_their_results_before_evaluating():
    """`train.best_metric: PSNR_ab` is checked at start-up against these names."""
    from framework.metrics.image import PSNR, SSIM
    from framework.metrics.image import L1Distance as L1

    assert [m.result_names() for m in (PSNR(suffix="_ab"), SSIM(suffix="_ba"), L1(suffix="_ab"), PSNR())] == [
        ["PSNR_ab"], ["SSIM_ba"], ["L1_ab"], ["PSNR"]]
    for unpaired in (PSNR(suffix="_ab"), L1(suffix="_ab")):
        unpaired.active = False  # evaluation samples that do not pair by name: nothing to report
        assert unpaired.result_names() == []


@pytest.mark.parametrize("make", [PSNR, SSIM, L1Distance])
def test_a_suffixed_metric_compares_the_outputs_it_names(make):
    fake, real = structured_pairs(n=2)
    outputs = {"fake_ab": fake, "real_ab": real, "fake": torch.zeros_like(fake), "real": torch.ones_like(real)}
    suffixed = make(suffix="_ab")
    suffixed.update(outputs)
    [(name, value)] = suffixed.compute().items()
    assert name.endswith("_ab") and value == pytest.approx(run(make(), fake, real, splits=(1,))[name[:-3]], rel=1e-12)


def test_outputs_without_the_pair_or_of_other_shapes_are_refused_naming_them():
    image = torch.zeros(2, 3, 8, 8)
    for outputs in ({"fake": image, "mask": image}, {"real": image, "fake_ab": image}):
        with pytest.raises(ValueError, match=re.escape(
                "the task's evaluation outputs hold no 'fake' and 'real' images to compare "
                f"(they have: {', '.join(sorted(outputs))})")):
            PSNR().update(outputs)
    with pytest.raises(ValueError, match=re.escape("fake (2, 3, 8, 8) and real (2, 3, 8, 9) images differ in shape")):
        PSNR().update({"fake": image, "real": torch.zeros(2, 3, 8, 9)})


def test_ssim_windows_are_positive_odd_sizes():
    for size in (0, 4, -3):
        with pytest.raises(ValueError, match=re.escape(f"kernel_size must be a positive odd number, got {size}")):
            SSIM(kernel_size=size)
    fake, real = structured_pairs(n=2)
    # a 1-pixel window: each pixel its own mean, no variance, so SSIM is the luminance term alone
    c1 = 0.01**2
    by_hand = ((2 * fake * real + c1) / (fake**2 + real**2 + c1)).mean().item()
    assert run(SSIM(kernel_size=1), fake, real, splits=(1,))["SSIM"] == pytest.approx(by_hand, rel=1e-5)
    assert 0 < run(SSIM(kernel_size=3), fake, real, splits=(1,))["SSIM"] < by_hand


def test_ssim_refuses_images_too_small_for_its_window_naming_both():
    fake, real = structured_pairs(n=1, size=5)  # reflection padding by 5 needs more than 5 pixels
    with pytest.raises(ValueError, match=re.escape("images of (5, 5) are smaller than the SSIM window 11")):
        run(SSIM(), fake, real, splits=())
    fake, real = structured_pairs(n=1, size=6)
    assert 0 < run(SSIM(), fake, real, splits=())["SSIM"] <= 1


def test_a_suffixed_metric_on_an_unpaired_dataset_reports_nothing_and_says_why(framework_log):
    class Unpaired:
        paired_by_name = False

    suffixed, plain = PSNR(suffix="_ab"), PSNR()
    for metric in (suffixed, plain):
        metric.use_dataset(Unpaired(), "metrics[0]", "data.val")
    assert suffixed.result_names() == [] and plain.result_names() == ["PSNR"]
    suffixed.update({"fake_ab": torch.zeros(1, 3, 8, 8)})  # nothing to compare: ignored
    assert suffixed.compute() == {}
    assert framework_log.messages == [
        "metrics[0]: PSNR with suffix _ab needs evaluation samples that pair by name; data.val does not "
        "(Unpaired): only images are logged"]
    suffixed.use_dataset(type("Paired", (), {})(), "metrics[0]", "data.val")  # no flag: pairs by name
    assert suffixed.result_names() == ["PSNR_ab"]

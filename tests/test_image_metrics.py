"""PSNR, SSIM and L1 against torchmetrics, their sums across ranks, and FID's local-weights rule."""

import re

import pytest
import torch
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError, UserError
from framework.metrics import FID, PSNR, SSIM, L1Distance
from framework.registry import METRICS


def image_pairs(n=6, size=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    real = torch.rand(n, 3, size, size, generator=generator)
    fake = (real + 0.1 * torch.randn(real.shape, generator=generator)).clamp(0, 1)
    return fake, real


def run(metric, fake, real, splits=(4,)):
    metric.reset()
    for f, r in zip(fake.tensor_split(splits), real.tensor_split(splits)):
        metric.update({"fake": f, "real": r})
    return metric.compute()


def test_psnr_ssim_l1_match_torchmetrics_over_several_batches():
    fake, real = image_pairs()
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
    ({"type": "FID"}, r"weights_path: FID needs a local Inception weights file and never downloads"),
    ({"type": "FID", "weights_path": "/nowhere/pt_inception.pth"}, r"weights_path: Inception weights file not found: /nowhere/pt_inception"),
    ({"type": "FID", "weights_path": "x", "extractor": "clip"}, r"extractor: unknown 'clip'"),
])
def test_fid_without_a_usable_local_weights_file_is_a_config_error(node, message):
    with pytest.raises(ConfigError, match=r"^metrics\[0\] \(FID\): " + message):
        METRICS.build(node, path="metrics[0]")


def test_fid_inception_without_torch_fidelity_says_what_to_install(tmp_path):
    pytest.importorskip("torchmetrics")
    try:
        import torch_fidelity  # noqa: F401
        pytest.skip("torch-fidelity is installed here")
    except ImportError:
        pass
    weights = tmp_path / "pt_inception.pth"
    weights.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"needs the torch-fidelity package"):
        METRICS.build({"type": "FID", "weights_path": str(weights)}, path="metrics[0]")


def test_fid_with_torchvision_inception_weights_from_a_local_file(tmp_path):
    from torchvision.models import inception_v3

    torch.manual_seed(0)
    saved = inception_v3(weights=None, aux_logits=True, init_weights=False).state_dict()
    weights = tmp_path / "inception_v3.pth"
    torch.save(saved, weights)
    fid = FID(weights_path=str(weights), extractor="torchvision")
    loaded = fid.fid.inception.network.state_dict()
    assert all(torch.equal(loaded[k], saved[k]) for k in loaded)  # the file's weights, nothing downloaded
    fake, real = image_pairs(n=4, size=16)
    value = run(fid, torch.zeros_like(real), real, splits=(2,))["FID"]  # one compute: a 2048-d sqrtm is slow
    assert 0 < value < float("inf")
    assert int(fid.states()["real_features_num_samples"]) == 4


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
    unpaired = PSNR(suffix="_ab")
    unpaired.active = False  # evaluation samples that do not pair by name: nothing to report
    assert unpaired.result_names() == []

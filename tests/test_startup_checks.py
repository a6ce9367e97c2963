"""Mistakes knowable at start-up (issue 42): each is one `error:` line naming the config key or
the samples, exit status 2, and nothing in the work dir but train.log; the first step's forward
that finds them changes nothing (framework/engine/startup_check.py)."""

import numpy as np
import pytest
import torch
from conftest import PIX2PIX_CONFIG, SEGMENTATION_CONFIG, TINY_PIX2PIX_RUN, TINY_UNET_RUN
from PIL import Image

import projects.pix2pix  # noqa: F401 (UNetGenerator, PatchGANDiscriminator, SyntheticPairs)
from framework.data import ImageMaskFolder
from framework.engine.build import build_task
from framework.engine.startup_check import check_first_step, first_training_batch
from framework.errors import ConfigError
from framework.models.discriminators import MultiScaleDiscriminator, min_image_side
from framework.registry import DATASETS
from support import REPO, call_tool

PIX2PIXHD_CONFIG = REPO / "projects/pix2pix/configs/pix2pixhd_shapes.yaml"
BATCH = "the first training batch (shapes_000000, shapes_000001)"
PAIRS = BATCH  # SyntheticPairs names its samples as the shapes it draws
# pix2pixHD's networks on 64x64 pairs, without the (random) VGG: a few seconds.
TINY_PIX2PIXHD_RUN = [o for o in TINY_PIX2PIX_RUN if "num_downs" not in o and "size=" not in o] + [
    "data.train.dataset.size=64", "data.val.dataset.size=64", "task.perceptual=null"]


def refused(work_dir, config, *overrides) -> str:
    """The error line of a run refused at start-up, checked to have written nothing but train.log."""
    result = call_tool("train", "--config", config, "--work-dir", work_dir, *overrides)
    assert result.returncode == 2, result.stderr
    assert sorted(p.name for p in work_dir.iterdir()) == ["train.log"]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0][len("error: "):]


def test_a_random_crop_one_pixel_larger_than_the_images_is_named_by_its_place_in_the_pipeline(tmp_path):
    crop = "data.train.dataset.pipeline=[{type: HorizontalFlip}, {type: RandomCrop, height: 33, width: 32}]"
    assert refused(tmp_path / "run", SEGMENTATION_CONFIG, *TINY_UNET_RUN, crop) == (
        "data.train.dataset.pipeline[1] (RandomCrop): Crop size (height, width) exceeds image dimensions "
        "(height, width): (33, 32) vs (32, 32) (data.train.dataset[0])")


def test_a_random_crop_in_the_evaluation_pipeline_is_named_there(tmp_path):
    crop = "+data.val.dataset.pipeline=[{type: RandomCrop, height: 32, width: 33}]"
    assert refused(tmp_path / "run", SEGMENTATION_CONFIG, *TINY_UNET_RUN, crop).startswith(
        "data.val.dataset.pipeline[0] (RandomCrop): Crop size (height, width) exceeds image dimensions")


def test_a_random_crop_as_large_as_the_images_passes_and_the_run_trains(tmp_path):
    crop = "data.train.dataset.pipeline=[{type: HorizontalFlip}, {type: RandomCrop, height: 32, width: 32}]"
    result = call_tool("train", "--config", SEGMENTATION_CONFIG, "--work-dir", tmp_path / "run", *TINY_UNET_RUN,
                       crop, "train.max_iters=2", "train.val_interval=2", "train.ckpt_interval=2")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "checkpoints" / "iter_2.pth").is_file()


def write_photos(root, turned: bool):
    """Two 48x64 photos with their masks; the second carries EXIF orientation 6 (turned 90 degrees
    clockwise) when `turned`, so it is read 64x48 and its mask is drawn on what it shows."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for name, orientation in (("a_photo", 1), ("b_photo", 6 if turned else 1)):
        image = Image.fromarray(np.full((48, 64, 3), 100, np.uint8))
        exif = image.getexif()
        exif[0x0112] = orientation
        image.save(root / "images" / f"{name}.png", exif=exif)
        shown = (64, 48) if orientation == 6 else (48, 64)
        Image.fromarray(np.zeros(shown, np.uint8)).save(root / "masks" / f"{name}.png")


@pytest.mark.parametrize("turned, batch_size", [(False, 2), (True, 1), (True, 2)])
def test_photos_turned_by_their_exif_orientation_without_a_resize_are_named(tmp_path, turned, batch_size):
    """Refused when a batch would hold both; one size, or batches of one sample, train."""
    write_photos(tmp_path / "photos", turned)
    dataset = (f"data.train.dataset={{type: ImageMaskFolder, root: {tmp_path / 'photos'}, "
               "classes: [background, circle, rectangle, triangle]}")
    overrides = [*TINY_UNET_RUN, dataset, f"data.train.batch_size={batch_size}"]
    if not turned or batch_size == 1:
        result = call_tool("train", "--config", SEGMENTATION_CONFIG, "--work-dir", tmp_path / "run", *overrides,
                           "train.max_iters=1", "train.val_interval=1", "train.ckpt_interval=1")
        assert result.returncode == 0, result.stderr
        return
    assert refused(tmp_path / "run", SEGMENTATION_CONFIG, *overrides) == (
        "data.train.dataset: samples of different sizes after the pipeline (image: a_photo is 48x64, b_photo is "
        "64x48), which no batch can hold: images of mixed sizes, or photos turned by their EXIF orientation; add a "
        "Resize (or a crop) to data.train.dataset.pipeline")


def test_a_resize_makes_the_turned_photos_one_batch(tmp_path):
    write_photos(tmp_path / "photos", turned=True)
    dataset = ImageMaskFolder(tmp_path / "photos", classes=["background", "thing"],
                              pipeline=[{"type": "Resize", "height": 40, "width": 40}])
    loader = torch.utils.data.DataLoader(dataset, batch_size=2)
    batch = first_training_batch(loader, None, torch.device("cpu"))
    assert batch["image"].shape == (2, 3, 40, 40) and batch["name"] == ["a_photo", "b_photo"]


@pytest.mark.parametrize("loss, line", [
    ("{type: FocalLoss, mode: binary}",
     "task.loss: FocalLoss mode: binary takes one logit channel (N x 1 x H x W), but the model gives 4; use mode: "
     f"multiclass for class ids, multilabel for 0/1 maps per class (the first training step, on {BATCH})"),
    ("{type: LovaszLoss, mode: multilabel}",
     "task.loss: LovaszLoss mode: multilabel takes a 0/1 target per class (N x C x H x W), but the target is class "
     f"ids (2, 32, 32) for logits (2, 4, 32, 32); use mode: multiclass (the first training step, on {BATCH})"),
])
def test_a_loss_mode_the_model_does_not_fit_is_named(tmp_path, loss, line):
    assert refused(tmp_path / "run", SEGMENTATION_CONFIG, *TINY_UNET_RUN, f"task.loss={loss}") == line


def test_a_model_taking_other_channels_than_the_data_is_named_by_its_in_channels(tmp_path):
    assert refused(tmp_path / "run", SEGMENTATION_CONFIG, *TINY_UNET_RUN, "task.model.in_channels=4") == (
        f"task.model.in_channels: model takes 4 channels but is given 3 in the first training step, on {BATCH}")


def test_a_discriminator_taking_other_channels_than_its_pairs_is_named_by_its_in_channels(tmp_path):
    assert refused(tmp_path / "run", PIX2PIX_CONFIG, *TINY_PIX2PIX_RUN, "task.discriminator.in_channels=3") == (
        "task.discriminator.in_channels: discriminator takes 3 channels but is given 6 in the first training step, "
        f"on {PAIRS}")


def test_a_multiscale_discriminator_too_deep_for_the_images_is_named(tmp_path):
    # 64x64: the third scale sees 16x16, one 2x2 map after three stride-2 layers; at least 93 needed.
    assert refused(tmp_path / "run", PIX2PIXHD_CONFIG, *TINY_PIX2PIXHD_RUN, "task.discriminator.num_scales=3") == (
        "task.discriminator: MultiScaleDiscriminator: images of 64x64 are too small for num_scales 3 x num_layers 3: "
        "it needs at least 93 pixels a side; lower num_scales or num_layers, or train on larger images "
        f"(the first training step, on {PAIRS})")


def test_feature_matching_on_a_discriminator_without_features_is_named(tmp_path):
    line = refused(tmp_path / "run", PIX2PIX_CONFIG, *TINY_PIX2PIX_RUN,
                   "+task.feature_matching={type: FeatureMatchingLoss}")
    assert line == ("task.feature_matching: feature matching needs the discriminator's intermediate features, but "
                    "its output on the fake images is a Tensor: use a discriminator that returns them "
                    f"(MultiScaleDiscriminator) (the first training step, on {PAIRS})")


@pytest.mark.parametrize("num_layers, num_scales, side", [(3, 1, 24), (3, 2, 47), (3, 3, 93), (1, 2, 11), (2, 3, 45)])
@pytest.mark.parametrize("norm", ["in", "bn", "none"])
def test_the_smallest_side_a_multiscale_discriminator_takes_is_where_torch_stops_computing(
        num_layers, num_scales, side, norm):
    """At the rule's side every scale computes; one pixel less (in either dimension), torch's own
    layers fail once the discriminator's check is bypassed, and the check refuses it first."""
    assert min_image_side(num_layers, num_scales) == side
    discriminator = MultiScaleDiscriminator(3, num_scales, 4, num_layers, norm).train()
    discriminator(torch.zeros(2, 3, side, side + 7))
    discriminator(torch.zeros(2, 3, side + 7, side))
    for height, width in ((side - 1, side + 7), (side + 7, side - 1)):
        with pytest.raises(ValueError, match=rf"images of {height}x{width} are too small .* at least {side} pixels"):
            discriminator(torch.zeros(2, 3, height, width))
    discriminator.min_side = 0
    for height, width in ((side - 1, side + 7), (side + 7, side - 1)):
        with pytest.raises((RuntimeError, ValueError)):
            discriminator(torch.zeros(2, 3, height, width))


@pytest.mark.parametrize("penalty", [{"gan_loss": "hinge"}, {"gan_loss": "hinge", "r1_weight": 1.0},
                                     {"gan_loss": "wgan-gp"}])
def test_the_first_step_forward_changes_nothing(penalty):
    """BatchNorm's statistics, the EMA copy, the D-step count, DiffAugment's p and the random
    generators are as before the check; with a gradient penalty (R1, WGAN-GP) the step runs with
    autograd, which the penalty needs."""
    task = build_task({"task": {
        "type": "GANTask", **penalty, "ema_decay": 0.5, "d_augment": {"type": "DiffAugment", "p": 0.5},
        "generator": {"type": "UNetGenerator", "base_channels": 8, "num_downs": 3, "norm": "bn"},
        "discriminator": {"type": "PatchGANDiscriminator", "in_channels": 6, "base_channels": 8, "num_layers": 2,
                          "norm": "bn"}}}, torch.device("cpu")).train()
    dataset = DATASETS.build({"type": "SyntheticPairs", "num_samples": 4, "size": 32})
    batch = first_training_batch(torch.utils.data.DataLoader(dataset, batch_size=2), None, torch.device("cpu"))
    before = {key: value.clone() for key, value in task.state_dict().items()}
    generator_state = torch.get_rng_state()
    check_first_step(task, batch, ["generator", "discriminator", "d_augment"])
    after = task.state_dict()
    assert [key for key in before if not torch.equal(before[key], after[key])] == []
    assert task.adversary.d_steps.value == 0 and task.ema.updates.value == 0
    assert torch.equal(torch.get_rng_state(), generator_state)


def test_an_error_outside_the_task_keys_names_the_task():
    task = build_task({"task": {"type": "SegmentationTask", "num_classes": 2, "loss": {"type": "CrossEntropyLoss"},
                                "model": {"type": "UNet", "in_channels": 3, "num_classes": 2, "base_channels": 4,
                                          "depth": 1}}}, torch.device("cpu"))
    batch = {"image": torch.zeros(2, 4, 8, 8, dtype=torch.uint8), "mask": torch.zeros(2, 8, 8, dtype=torch.long)}
    with pytest.raises(ConfigError, match=r"^task: The size of tensor a \(4\) must match the size of tensor b \(3\) "
                                          r".* \(the first training step, on the first two samples of "
                                          r"data\.train\.dataset\)$"):
        check_first_step(task, batch, ["model", "loss"])


def test_a_component_counting_its_calls_counts_none_from_the_check():
    """A loss that turns NaN at its 3rd training call (tests/probes.py) still does: the check's
    call is taken back with the python numbers the task's modules hold."""
    import probes  # noqa: F401 (NaNAtIteration)

    task = build_task({"task": {"type": "SegmentationTask", "num_classes": 2, "loss": {
        "type": "NaNAtIteration", "iteration": 3, "loss": {"type": "CrossEntropyLoss"}},
        "model": {"type": "UNet", "in_channels": 3, "num_classes": 2, "base_channels": 4, "depth": 1}}},
        torch.device("cpu"))
    batch = {"image": torch.zeros(2, 3, 8, 8, dtype=torch.uint8), "mask": torch.zeros(2, 8, 8, dtype=torch.long)}
    check_first_step(task, batch, ["model", "loss"])
    assert task.loss.calls == 0

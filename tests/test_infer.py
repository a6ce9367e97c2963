"""The predictor (whole, slide, any size, TTA) and tools/infer.py on the session's tiny models."""

import json
import multiprocessing

import cv2
import inference_probes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from framework.engine.trained import load_trained_task
from framework.inference.generator import GeneratorPredictor
from framework.inference.segmentation import SegmentationPredictor, tile_starts
from framework.inference.settings import InferenceSettings
from framework.models.unet import UNet
from support import call_tool


def pointwise_network() -> nn.Module:
    """Fully convolutional with a 1x1 receptive field: a tile's logits are the image's logits there."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 1), nn.ReLU(), nn.Conv2d(8, 4, 1)).double().eval()


def test_tiles_cover_the_image_exactly():
    assert tile_starts(128, 32, 24) == [0, 24, 48, 72, 96]
    assert tile_starts(100, 32, 32) == [0, 32, 64, 68]
    assert tile_starts(20, 32, 16) == [0]


@pytest.mark.parametrize("stride, tile_batch", [(32, 1), (24, 3), (7, 16)])
def test_slide_equals_whole_image_inference_on_an_image_4x_the_crop(stride, tile_batch):
    network = pointwise_network()
    image = torch.rand(2, 3, 128, 128, dtype=torch.float64)  # 4x the 32-pixel crop on each side
    whole = SegmentationPredictor(network).logits(image)
    settings = InferenceSettings(mode="slide", crop=32, stride=stride, tile_batch=tile_batch)
    slide = SegmentationPredictor(network, settings).logits(image)
    # float64 and a pointwise network: the only differences are rounding in the averaging.
    torch.testing.assert_close(slide, whole, rtol=0, atol=1e-12)


def peak_memory(size, mode, tile_batch, folder):
    out = folder / f"{size}-{mode}-{tile_batch}.json"
    # Forked from this process (the probe sets one torch thread, as DataLoader workers do):
    # a fresh address space per measurement, without the fork server's start-up.
    process = multiprocessing.get_context("fork").Process(
        target=inference_probes.inference_peak_memory, args=(size, mode, tile_batch, str(out)))
    process.start()
    process.join(120)
    assert process.exitcode == 0
    return json.loads(out.read_text())


def test_slide_peak_memory_grows_with_the_tile_batch_not_the_image(tmp_path):
    """Peak resident memory added by inference, each measured in a fresh process. One tile's
    activations: 64 channels x 32 x 32 float32 = 256 KiB per layer."""
    small = peak_memory(128, "slide", 1, tmp_path)
    large = peak_memory(512, "slide", 1, tmp_path)
    batched = peak_memory(128, "slide", 8, tmp_path)
    whole_small = peak_memory(128, "whole", 1, tmp_path)
    tile_activation = 64 * inference_probes.CROP**2 * 4
    # A 16x larger image adds only the logits it returns and a per-pixel tile count (half the
    # logits' size with 2 classes), not activations: whole-image inference of the small image
    # already needs more.
    # (1 MiB of slack for the allocator; a 64-channel map of the large image is 64 MiB.)
    assert large["added"] - small["added"] <= 1.5 * large["logits"] + 2**20
    assert large["added"] < whole_small["added"]
    # 7 more tiles per forward pass: at least 7 more tiles' worth of activations.
    assert batched["added"] - small["added"] >= 7 * tile_activation


def test_any_image_size_is_padded_for_the_network_and_cropped_back():
    torch.manual_seed(0)
    network = UNet(3, 4, base_channels=4, depth=3).eval()  # sides must be multiples of 8
    image = torch.rand(1, 3, 37, 53)
    logits = SegmentationPredictor(network).logits(image)
    assert logits.shape == (1, 4, 37, 53)
    padded = F.pad(image, (0, 3, 0, 3))  # to 40 x 56, zeros
    with torch.no_grad():
        torch.testing.assert_close(logits, network(padded)[..., :37, :53])


def test_flip_and_multiscale_average_the_logits_of_each_view():
    torch.manual_seed(0)
    network = nn.Conv2d(3, 4, 3, padding=1).eval()
    image = torch.rand(1, 3, 32, 48)
    settings = InferenceSettings(flip=True, scales=[0.5, 1.0])
    with torch.no_grad():
        views = []
        for scale in (0.5, 1.0):
            x = F.interpolate(image, scale_factor=scale, mode="bilinear") if scale != 1 else image
            for out in (network(x), network(x.flip(-1)).flip(-1)):
                views.append(F.interpolate(out, size=(32, 48), mode="bilinear") if scale != 1 else out)
        expected = torch.stack(views).mean(0)
    torch.testing.assert_close(SegmentationPredictor(network, settings).logits(image), expected)


def test_bad_inference_settings_name_the_key():
    with pytest.raises(ValueError, match="inference.crop"):
        InferenceSettings(mode="slide")
    with pytest.raises(ValueError, match="stride"):
        InferenceSettings(mode="slide", crop=16, stride=32)
    with pytest.raises(ValueError, match="unknown key"):
        InferenceSettings.from_config({"mdoe": "slide"})


def test_validation_predicts_with_the_task_inference_settings(unet_run):
    """What validation measures is what tools/infer.py runs: val_step goes through the predictor."""
    task, _ = load_trained_task(unet_run.config, unet_run.checkpoint)
    task.inference = InferenceSettings(mode="slide", crop=16, stride=8, flip=True)
    batch = {"image": torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8), "mask": torch.zeros(2, 32, 32).long()}
    with torch.no_grad():
        expected = SegmentationPredictor(task.model, task.inference, task.normalize).predict(batch["image"])
        plain = SegmentationPredictor(task.model, InferenceSettings(), task.normalize).predict(batch["image"])
        assert torch.equal(task.val_step(batch)["pred"], expected)
    assert not torch.equal(expected, plain)  # the settings make a difference here


def write_images(folder, sizes):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, (height, width) in sizes.items():
        cv2.imwrite(str(folder / name), rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def test_infer_writes_palette_masks_and_overlays_at_each_input_size(unet_run, tmp_path):
    sizes = {"small.png": (37, 53), "photo.jpg": (70, 100), "large.png": (300, 420)}  # large: 6 x 8 tiles
    write_images(tmp_path / "in", sizes)
    out = tmp_path / "out"
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "in", "--output", out,
                       "--mode", "slide", "--crop", "64", "64", "--stride", "48", "48", "--tile-batch", "8")
    assert result.returncode == 0, result.stderr
    assert "3 images in" in result.stdout and "images/s" in result.stdout
    task, _ = load_trained_task(unet_run.config, unet_run.checkpoint)
    predictor = task.predictor(InferenceSettings(mode="slide", crop=64, stride=48, tile_batch=8))
    for name, (height, width) in sizes.items():
        stem = name.split(".")[0]
        mask = Image.open(out / "masks" / f"{stem}.png")
        assert mask.mode == "P" and mask.size == (width, height)
        assert np.array(mask.getpalette()[:12]).reshape(4, 3).tolist() == task.palette.tolist()
        image = cv2.cvtColor(cv2.imread(str(tmp_path / "in" / name)), cv2.COLOR_BGR2RGB)
        expected = predictor.predict(torch.from_numpy(image).permute(2, 0, 1)[None].contiguous())[0]
        assert np.array_equal(np.asarray(mask), expected.numpy())
        assert cv2.imread(str(out / "overlays" / f"{stem}.png")).shape == (height, width, 3)


def test_infer_runs_the_ema_generator_of_a_gan(pix2pix_run, tmp_path):
    write_images(tmp_path / "in", {"a.png": (37, 53)})
    result = call_tool("infer", *pix2pix_run.args(), "--input", f"{tmp_path}/in/*.png", "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = cv2.cvtColor(cv2.imread(str(tmp_path / "out" / "a.png")), cv2.COLOR_BGR2RGB)
    assert written.shape == (37, 53, 3)
    task, _ = load_trained_task(pix2pix_run.config, pix2pix_run.checkpoint)
    image = torch.from_numpy(cv2.cvtColor(cv2.imread(str(tmp_path / "in" / "a.png")), cv2.COLOR_BGR2RGB))
    image = image.permute(2, 0, 1)[None].contiguous()
    predictor = GeneratorPredictor(task.generator_for(), task.noise_shape)
    assert predictor.generator is task.generator_ema
    expected = (predictor.translate(image)[0] * 255).round().byte().permute(1, 2, 0).numpy()
    assert np.abs(written.astype(int) - expected).max() == 0
    predictor.generator = task.generator  # the raw generator gives another picture: EMA was used
    raw = (predictor.translate(image)[0] * 255).round().byte().permute(1, 2, 0).numpy()
    assert not np.array_equal(raw, expected)


def test_infer_names_a_missing_input(unet_run, tmp_path):
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "nothing*.png", "--output", tmp_path)
    assert result.returncode == 2
    assert "error: --input" in result.stderr and "nothing*.png" in result.stderr


def test_infer_draws_seeded_samples_from_an_unconditional_gan(dcgan_run, tmp_path):
    result = call_tool("infer", *dcgan_run.args(), "--output", tmp_path, "--num", "5", "--seed", "7",
                       "--batch-size", "2")
    assert result.returncode == 0, result.stderr
    assert "5 images in" in result.stdout
    task, _ = load_trained_task(dcgan_run.config, dcgan_run.checkpoint)
    predictor = GeneratorPredictor(task.generator_for(), task.noise_shape)
    assert predictor.generator is task.generator_ema
    expected = predictor.sample(predictor.noise(5, 7, torch.device("cpu")))
    for i, image in enumerate(expected):
        written = cv2.cvtColor(cv2.imread(str(tmp_path / f"sample_{i:04d}.png")), cv2.COLOR_BGR2RGB)
        assert np.array_equal(written, (image * 255).round().byte().permute(1, 2, 0).numpy())


# Each option with a value that would change the output if the task read it; the refusal names it.
SEGMENTATION_ONLY = [["--flip"], ["--scales", "0.5", "1"], ["--mode", "slide", "--crop", "16", "16", "--stride", "8", "8"],
                     ["--tile-batch", "2"]]


@pytest.mark.parametrize("option", SEGMENTATION_ONLY, ids=lambda o: o[0])
@pytest.mark.parametrize("run", ["pix2pix_run", "dcgan_run"])
def test_infer_refuses_segmentation_options_on_a_gan_naming_them(run, option, request, tmp_path):
    write_images(tmp_path / "in", {"a.png": (20, 24)})
    inputs = [] if run == "dcgan_run" else ["--input", tmp_path / "in"]
    out = tmp_path / "out"
    result = call_tool("infer", *request.getfixturevalue(run).args(), *inputs, "--output", out, *option)
    assert result.returncode == 2, result.stderr
    named = [o for o in option if o.startswith("--")]
    assert result.stderr.startswith(f"error: {', '.join(named)}: ") and "is a GAN" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("option", [["--num", "2"], ["--seed", "3"], ["--num", "1", "--seed", "0"]],
                         ids=["num", "seed", "both"])
@pytest.mark.parametrize("run", ["unet_run", "pix2pix_run"])
def test_infer_refuses_noise_options_where_the_output_is_not_drawn_from_noise(run, option, request, tmp_path):
    # --num 1 and --seed 0 are the smallest values (--seed 0 the default): refused because given
    write_images(tmp_path / "in", {"a.png": (20, 24)})
    out = tmp_path / "out"
    result = call_tool("infer", *request.getfixturevalue(run).args(), "--input", tmp_path / "in", "--output", out,
                       *option)
    assert result.returncode == 2, result.stderr
    named = ", ".join(o for o in option if o.startswith("--"))
    assert result.stderr.startswith(f"error: {named}: ") and "generates from noise (DCGAN)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_infer_refuses_input_images_for_a_generator_from_noise(dcgan_run, tmp_path):
    write_images(tmp_path / "in", {"a.png": (20, 24)})
    out = tmp_path / "out"
    result = call_tool("infer", *dcgan_run.args(), "--input", tmp_path / "in", "--output", out, "--num", "2")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --input: {'GANTask'} generates from noise (--num, --seed); "
                                     "it takes no input images")
    assert not out.exists()


def test_infer_options_a_gan_uses_still_work(pix2pix_run, dcgan_run, tmp_path):
    write_images(tmp_path / "in", {"a.png": (20, 24), "b.png": (20, 24)})
    result = call_tool("infer", *pix2pix_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "p",
                       "--batch-size", "1")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["a.png", "b.png"]
    result = call_tool("infer", *dcgan_run.args(), "--output", tmp_path / "d")  # --num's default
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "d").glob("sample_*.png"))) == 16


@pytest.mark.parametrize("run, message", [
    ("unet_run", "--direction: SegmentationTask has no generators; --direction is for a task that translates both "
                 "ways (CycleGANTask)"),
    ("pix2pix_run", "--direction: GANTask has one generator; --direction is for a task that translates both ways "
                    "(CycleGANTask)"),
    ("dcgan_run", "--direction: GANTask has one generator"),
])
def test_infer_refuses_a_direction_where_there_is_one_or_no_generator(run, message, request, tmp_path):
    write_images(tmp_path / "in", {"a.png": (20, 24)})
    inputs = [] if run == "dcgan_run" else ["--input", tmp_path / "in"]
    out = tmp_path / "out"
    result = call_tool("infer", *request.getfixturevalue(run).args(), *inputs, "--output", out, "--direction", "AtoB")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {message}") and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()

"""Saliency (framework/inference/saliency.py, Model.saliency, tools/infer.py --saliency): the
gradient is the derivative of the score the prediction path computes (a central finite difference
in float64, through padding, scales, flips and tiles), SmoothGrad's noise belongs to the item and
not to its batch, a model folder without a discriminator refuses D's verdict, and the CLI writes
overlays at each input's size."""

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import framework
from framework.errors import ConfigError
from framework.inference.generator import GeneratorPredictor, to_unit
from framework.inference.saliency import input_gradients, item_scores, region_mask, smoothgrad_noise
from framework.losses.gan import sample_verdicts
from framework.tasks.cyclegan import CycleGANTask
from framework.tasks.gan import GANTask
from framework.tasks.segmentation import SegmentationTask
from framework.visualization.heatmap import heat_overlay
from support import REPO, call_tool

PIXELS = [(0, 1, 2), (1, 4, 6), (2, 7, 3), (0, 5, 8)]  # (channel, row, column): in, at the edge of and beside the box
EPSILON = 1e-3  # on the 0..255 scale; the networks are smooth (tanh), so the central difference is O(eps^2)


def smooth_network(in_channels: int, out_channels: int, divisor: int = 1) -> nn.Module:
    network = nn.Sequential(nn.Conv2d(in_channels, 6, 3, padding=1), nn.Tanh(), nn.Conv2d(6, out_channels, 3, padding=1))
    network.size_divisor = divisor  # inference pads each side to a multiple of this (framework/inference/settings.py)
    return network


def central_differences(score, pixels: torch.Tensor) -> list[float]:
    """d score / d pixel at PIXELS of item 0, each from score(pixels +- EPSILON there)."""
    found = []
    for channel, row, column in PIXELS:
        step = torch.zeros_like(pixels)
        step[0, channel, row, column] = EPSILON
        with torch.no_grad():
            found.append(float((score(pixels + step) - score(pixels - step))[0]) / (2 * EPSILON))
    return found


@pytest.mark.parametrize("inference", [
    {"flip": True, "scales": [0.75, 1.0], "size_divisor": 4},  # resized, flipped, padded
    {"mode": "slide", "crop": 6, "stride": 4, "size_divisor": 4},  # overlapping tiles, each padded
])
def test_a_segmenter_gradient_is_the_finite_difference_of_the_predicted_logits(inference):
    torch.manual_seed(0)
    task = SegmentationTask(smooth_network(3, 3), nn.CrossEntropyLoss(), 3, inference=inference).double().eval()
    pixels = torch.rand(2, 3, 9, 11, dtype=torch.float64) * 255
    box = (2, 1, 7, 6)  # x0, y0, x1, y1
    mask = torch.from_numpy(region_mask(box, 9, 11))
    gradient, scores = input_gradients(task.saliency_score(2), pixels, region=box)
    predicted = lambda x: task.predictor().logits(x)[:, 2][:, mask].sum(dim=1)  # noqa: E731 (what predict runs)
    torch.testing.assert_close(scores, predicted(pixels))
    expected = central_differences(predicted, pixels)
    got = [float(gradient[0, c, r, w]) for c, r, w in PIXELS]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    assert gradient.shape == pixels.shape and all(value != 0 for value in got)


@pytest.mark.parametrize("kind, target", [("pix2pix", "output"), ("pix2pix", "discriminator"),
                                          ("cyclegan", "discriminator")])
def test_a_generator_gradient_is_the_finite_difference_of_what_the_generator_makes(kind, target):
    torch.manual_seed(0)
    generator = nn.Sequential(smooth_network(3, 3, divisor=4), nn.Tanh())
    discriminator = nn.Sequential(nn.Conv2d(6 if kind == "pix2pix" else 3, 4, 3, stride=2), nn.Tanh(),
                                  nn.Conv2d(4, 1, 3))
    if kind == "pix2pix":
        task, direction = GANTask(generator, discriminator), None
    else:  # BtoA: G_ba translates, D_a (the domain it translates into) judges the translation alone
        other_generator, other_discriminator = nn.Sequential(smooth_network(3, 3), nn.Tanh()), smooth_network(3, 1)
        task = CycleGANTask(other_generator, generator, discriminator, other_discriminator)  # AtoB's: others
        direction = "BtoA"
    task = task.double().eval()
    pixels = torch.rand(1, 3, 10, 11, dtype=torch.float64) * 255
    region = None if target == "discriminator" else (4, 5, 5, 6)  # one output pixel
    gradient, _ = input_gradients(task.saliency_score(target, direction), pixels, region=region)
    translate = GeneratorPredictor(generator).signed_output

    def score(x):  # what infer writes (in [0, 1]), or D on what it sees in training
        if target == "output":
            return to_unit(translate(x))[:, :, 5, 4].sum(dim=1)
        seen = torch.cat([x / 127.5 - 1, translate(x)], dim=1) if kind == "pix2pix" else translate(x)
        return sample_verdicts(discriminator(seen))

    expected = central_differences(score, pixels)
    np.testing.assert_allclose([float(gradient[0, c, r, w]) for c, r, w in PIXELS], expected, rtol=1e-6, atol=1e-9)
    assert any(value != 0 for value in expected)


def test_regions_are_checked_and_a_verdict_takes_none():
    assert region_mask((1, 2, 3, 4), 5, 5).sum() == 4
    for bad, message in [((0, 0, 9, 2), "outside"), ((2, 0, 2, 2), "empty"), (np.zeros((4, 4), bool), "shape"),
                         ("box", "boolean mask or a box")]:
        with pytest.raises(ConfigError, match=message):
            region_mask(bad, 5, 5)
    with pytest.raises(ConfigError, match="one number per image"):
        item_scores(torch.zeros(2), np.ones((3, 3), bool))
    for options, message in [({"samples": 0}, "saliency samples"), ({"noise": float("nan")}, "saliency noise"),
                             ({"seed": -1}, r"saliency seed: an integer in \[0, 2\*\*63\), got -1")]:
        with pytest.raises(ConfigError, match=message):
            input_gradients(lambda x: x.sum(dim=1), torch.zeros(1, 3, 2, 2), method="smoothgrad", **options)


def write_images(folder, sizes, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for index, size in enumerate(sizes):
        paths.append(folder / f"{'abcd'[index]}.png")
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def test_smoothgrad_of_a_seed_is_the_same_at_batch_size_1_and_3(unet_run, tmp_path):
    pixels = torch.rand(3, 3, 5, 6) * 255
    alone = [smoothgrad_noise(pixels[i:i + 1], 2, 7, [key], 0.2) for i, key in enumerate(["a", "b", "c"])]
    assert torch.equal(torch.cat(alone), smoothgrad_noise(pixels, 2, 7, ["a", "b", "c"], 0.2))  # per item, bit for bit
    model = framework.load(unet_run.checkpoint, device="cpu")
    paths = write_images(tmp_path, [(20, 24)] * 3)
    options = {"method": "smoothgrad", "samples": 3, "noise": 0.2, "seed": 7}
    one = model.saliency(paths, "1", batch_size=1, **options)
    three = model.saliency(paths, "1", batch_size=3, **options)
    other_seed = model.saliency(paths[0], "1", **{**options, "seed": 8})
    for a, b in zip(one, three):  # the same noise; the convolutions' sums may round apart by batch size
        np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-4, atol=1e-9)
        np.testing.assert_allclose(a.heatmap, b.heatmap, atol=1e-4)
    assert np.abs(other_seed.gradient - one[0].gradient).max() > 100 * np.abs(one[0].gradient - three[0].gradient).max()
    plain = model.saliency(paths[0], "1")
    assert not np.allclose(plain.gradient, one[0].gradient) and plain.score == one[0].score


def test_a_model_folder_refuses_the_discriminator_it_does_not_hold(pix2pix_run, tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    trained = framework.load(pix2pix_run.checkpoint, device="cpu")
    assert trained.saliency(image, "discriminator").heatmap.shape == (32, 32)  # the checkpoint holds D
    folder = framework.load(trained.save_pretrained(tmp_path / "model"), device="cpu")
    with pytest.raises(ConfigError) as error:
        folder.saliency(image, "discriminator")
    assert str(error.value) == ("saliency target 'discriminator': this GANTask was loaded from a model folder, which "
                                "holds the generator's weights only; load its run folder or checkpoint to ask the "
                                "discriminator")
    assert f"`{error.value}`" in (REPO / "docs/troubleshooting.md").read_text()
    output = folder.saliency(image, "output", region=(3, 3, 4, 4))
    assert np.array_equal(output.gradient, trained.saliency(image, "output", region=(3, 3, 4, 4)).gradient)


def test_infer_writes_saliency_overlays_of_a_class_at_each_input_size(unet_run, tmp_path):
    paths = write_images(tmp_path / "in", [(32, 32), (21, 27)])
    result = call_tool("infer", *unet_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "out",
                       "--saliency", "1", "--smoothgrad", "2", "--seed", "3")
    assert result.returncode == 0, result.stderr
    model = framework.load(unet_run.checkpoint, device="cpu")
    for path in paths:
        image = np.asarray(Image.open(path))
        written = np.asarray(Image.open(tmp_path / "out/saliency" / path.name).convert("RGB"))
        expected = model.saliency(path, "1", method="smoothgrad", samples=2, seed=3)
        assert written.shape == image.shape and np.array_equal(written, heat_overlay(image, expected.heatmap))
        assert (tmp_path / "out/masks" / path.name).is_file()  # the masks are written as without --saliency
    wrong = call_tool("infer", *unet_run.args(), "--input", tmp_path / "in", "--output", tmp_path / "x",
                      "--saliency", "teapot")
    assert wrong.returncode != 0 and "saliency target 'teapot': not a class of this model" in wrong.stderr
    assert not (tmp_path / "x").exists()
    maps = write_images(tmp_path / "y/saliency", [(8, 8)])  # the maps would land on the inputs: refused, kept
    before = maps[0].read_bytes()
    over = call_tool("infer", *unet_run.args(), "--input", maps[0], "--output", tmp_path / "y", "--saliency", "1")
    assert over.returncode == 2 and f"would write {maps[0]}, which is --input" in over.stderr
    assert maps[0].read_bytes() == before and not (tmp_path / "y/masks").exists()


def test_troubleshooting_quotes_the_saliency_refusals_as_they_read():
    shapes = SegmentationTask(smooth_network(3, 4), nn.CrossEntropyLoss(), 4,
                              class_names=["background", "circle", "rectangle", "triangle"]).eval()
    pix2pix = GANTask(smooth_network(3, 3), smooth_network(6, 1)).eval()
    dcgan = GANTask(nn.ConvTranspose2d(4, 3, 4), smooth_network(3, 1), latent_dim=4).eval()
    attempts = [lambda: shapes.saliency_score("teapot"), lambda: pix2pix.saliency_score("circle"),
                lambda: dcgan.saliency_score("output"), lambda: region_mask((0, 0, 90, 20), 48, 64),
                lambda: item_scores(torch.zeros(1), np.ones((2, 2), bool)),
                lambda: input_gradients(lambda x: x, torch.zeros(1, 3, 2, 2), method="smooth"),
                lambda: input_gradients(lambda x: x, torch.zeros(1, 3, 2, 2), method="smoothgrad", samples=0)]
    page = (REPO / "docs/troubleshooting.md").read_text()
    for attempt in attempts:
        with pytest.raises(ConfigError) as error:
            attempt()
        assert f"`{error.value}`" in page, str(error.value)
    unused = call_tool("infer", "--config", "c.yaml", "--checkpoint", "c.pth", "--output", "o", "--smoothgrad", "2")
    assert unused.returncode == 2 and f"`{unused.stderr.strip().removeprefix('error: ')}`" in page

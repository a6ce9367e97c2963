"""What the Python API reads from an image array, and that it refuses what tools/infer.py refuses
in the same words: uint16 and wider integer images are their uint8 selves, floats are on the
0..255 scale (as N-channel image files are read), a float image in 0..1 is refused rather than
read as a near-black one; an option a kind of model does not use is refused by infer.py's rule."""

import argparse

import numpy as np
import pytest
import torch
from test_api_arguments_table import CONFIGS, IMAGE

from framework.api.file_runs import file_run
from framework.api.model import Model
from framework.engine.trained import load_trained_task
from framework.errors import ConfigError
from tools.infer import check_infer_options


@pytest.fixture(scope="module")
def models():
    device = torch.device("cpu")
    return {name: Model(*load_trained_task(str(CONFIGS[name][0]), None, CONFIGS[name][1], device), device)
            for name in ("unet", "pix2pix")}


def test_uint16_and_wider_integer_images_are_read_as_their_uint8_selves(models):
    wide = [IMAGE.astype(np.uint16) * 257, IMAGE.astype(np.int64), IMAGE.astype(np.float32)]
    expected = models["pix2pix"].generate(IMAGE)
    for image in wide:  # a generator's output moves with any change of its input's scale
        assert (models["pix2pix"].generate(image) == expected).all(), image.dtype
    _, probabilities = models["unet"].predict(IMAGE, probabilities=True)
    for image in wide:
        assert np.array_equal(models["unet"].predict(image, probabilities=True)[1], probabilities), image.dtype


def test_a_float_image_in_0_to_1_is_refused_not_read_as_a_dark_one(models):
    unit = (IMAGE / 255).astype(np.float32)
    for call in (lambda: models["unet"].predict(unit), lambda: models["pix2pix"].generate([IMAGE, unit]),
                 lambda: models["unet"].saliency(unit, 1)):
        with pytest.raises(ConfigError, match=r"0\.\.1.*0\.\.255") as error:
            call()
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"conditions\[1\]"):
        models["pix2pix"].generate([IMAGE, unit])
    black = np.zeros((32, 32, 3), np.float32)  # all zero is the same image on either scale
    assert (models["unet"].predict(black) == models["unet"].predict(black.astype(np.uint8))).all()


def test_pix2pix_refuses_num_seed_samples_as_infer_does(models):
    model = models["pix2pix"]
    for option in ("num", "seed", "samples"):
        with pytest.raises(ConfigError) as api:
            model.generate(IMAGE, **{option: 3})
        with pytest.raises(ConfigError) as cli:
            file_run(model, {option: 3, "batch_size": 4, "amp": False})
        assert str(api.value).startswith(f"{option}: ") and str(cli.value).startswith(f"--{option}: ")
        words = {"num": "generates from noise", "seed": "generates from noise", "samples": "semantic synthesis"}
        assert words[option] in str(api.value) and words[option] in str(cli.value)


def test_the_api_and_infer_check_numbers_by_one_rule(models):
    options = dict.fromkeys(["tile_batch", "crop", "stride", "scales", "num", "samples", "smoothgrad", "saliency"])
    for option, value, call in [("seed", -1, lambda: models["pix2pix"].generate(IMAGE, seed=-1)),
                                ("batch_size", 0, lambda: models["unet"].predict(IMAGE, batch_size=0))]:
        with pytest.raises(ConfigError) as api:
            call()
        args = argparse.Namespace(**{**options, "seed": None, "batch_size": 4, option: value})
        with pytest.raises(ConfigError) as cli:
            check_infer_options(args)
        assert str(api.value).split(": ", 1) == [option, str(cli.value).split(": ", 1)[1]]

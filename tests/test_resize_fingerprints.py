"""Behavioural fingerprints of the recipes' resize (issue 61, bug 1): each SPADE, OASIS and pix2pixHD
recipe resizes its images as the official loader does, PIL's BICUBIC (filtered on downscale), and
puts its label maps on PIL NEAREST's grid. The reference is Pillow at run time and the values
pinned in tests/data/resize_fingerprints.json, with the official repository, commit and code."""

from __future__ import annotations

import json
from functools import lru_cache

import albumentations as A
import numpy as np
import pytest
from PIL import Image

from framework.config import load_config, to_plain
from framework.data.transforms import build_pipeline
from framework.errors import ConfigError
from support import REPO

FINGERPRINTS = json.loads((REPO / "tests" / "data" / "resize_fingerprints.json").read_text())


@lru_cache(maxsize=2)
def noise(height: int, width: int) -> np.ndarray:
    """The fixed noise image of the fingerprints (their `noise`)."""
    return np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)


def pil_resize(array: np.ndarray, height: int, width: int, pil_filter: int) -> np.ndarray:
    return np.asarray(Image.fromarray(array).resize((width, height), pil_filter))


@lru_cache(maxsize=1)
def resolved(config: str) -> dict:
    return to_plain(load_config(str(REPO / config)))


def resize_node(config: str, split: str) -> dict:
    """The Resize node that opens the resolved config's `split` pipeline."""
    node = resolved(config)["data"][split]["dataset"]["pipeline"][0]
    assert node["type"] == "Resize", f"{config}: data.{split} pipeline starts with {node}"
    return node


@pytest.mark.parametrize("config", sorted(FINGERPRINTS["recipes"]))
def test_each_recipe_resizes_as_its_official_loader(config):
    recipe = FINGERPRINTS["recipes"][config]
    height, width = recipe["source_size"]
    image = noise(height, width)
    labels = np.random.default_rng(1).integers(0, 35, (height, width), dtype=np.uint8)
    for split in ("train", "val"):
        expected = recipe[split]
        node = resize_node(config, split)
        assert [node["height"], node["width"]] == expected["size"]
        out = build_pipeline([node])(image=image, mask=labels)
        np.testing.assert_array_equal(out["image"], pil_resize(image, *expected["size"], Image.BICUBIC))
        assert float(out["image"].std()) == pytest.approx(expected["std"], abs=1e-9)
        assert [out["image"][y, x].tolist() for y, x, _ in expected["pixels"]] == [rgb for *_, rgb in expected["pixels"]]
        np.testing.assert_array_equal(out["mask"], pil_resize(labels, *expected["size"], Image.NEAREST))


@pytest.mark.parametrize("case", ["4x", "non_integer"])
def test_label_maps_take_the_pixels_pil_nearest_takes(case):
    grid = FINGERPRINTS["label_grid"][case]
    (height, width), (out_height, out_width) = grid["from"], grid["to"]
    where = np.arange(height * width, dtype=np.int32).reshape(height, width)  # each pixel holds its index
    labels = np.random.default_rng(2).integers(0, 151, (height, width), dtype=np.uint8)
    instances = np.random.default_rng(3).integers(0, 34000, (height, width), dtype=np.uint16)
    resize = build_pipeline([{"type": "Resize", "height": out_height, "width": out_width, "interpolation": 2}])
    out = resize(image=np.zeros((height, width, 3), np.uint8), mask=where, masks=[labels, instances])
    rows, cols = np.divmod(out["mask"], width)
    assert rows[:len(grid["source_rows"]), 0].tolist() == grid["source_rows"]
    assert cols[0, :len(grid["source_cols"])].tolist() == grid["source_cols"]
    np.testing.assert_array_equal(out["mask"], pil_resize(where, out_height, out_width, Image.NEAREST))
    np.testing.assert_array_equal(out["masks"][0], pil_resize(labels, out_height, out_width, Image.NEAREST))
    # 16-bit instance maps as Pillow's 32-bit mode holds them (how PNGs of 16 bits opened before Pillow 10)
    np.testing.assert_array_equal(out["masks"][1], pil_resize(instances.astype(np.int32), out_height, out_width,
                                                              Image.NEAREST))


@pytest.mark.parametrize("interpolation, pil_filter", [(0, Image.NEAREST), (1, Image.BILINEAR), (2, Image.BICUBIC),
                                                       (3, Image.BOX), (4, Image.LANCZOS)],
                         ids=["nearest", "bilinear", "bicubic", "area-box", "lanczos"])
@pytest.mark.parametrize("size", [(37, 61), (97, 131)], ids=["down", "up"])
def test_each_interpolation_is_the_pil_filter_of_its_name(interpolation, pil_filter, size):
    image = noise(60, 90)
    out = build_pipeline([{"type": "Resize", "height": size[0], "width": size[1], "interpolation": interpolation}])
    np.testing.assert_array_equal(out(image=image)["image"], pil_resize(image, *size, pil_filter))



def test_area_for_downscale_takes_pils_box_filter_on_downscale_only():
    image = noise(60, 90)
    node = {"type": "Resize", "interpolation": 2, "area_for_downscale": "image"}
    down = build_pipeline([{**node, "height": 37, "width": 61}])(image=image)["image"]
    up = build_pipeline([{**node, "height": 97, "width": 131}])(image=image)["image"]
    np.testing.assert_array_equal(down, pil_resize(image, 37, 61, Image.BOX))
    np.testing.assert_array_equal(up, pil_resize(image, 97, 131, Image.BICUBIC))

def test_other_dtypes_and_channel_counts_resize_band_by_band_as_pil():
    image = noise(60, 90)
    resize = build_pipeline([{"type": "Resize", "height": 37, "width": 61, "interpolation": 2}])
    floats = image.astype(np.float32) / 255
    out = resize(image=floats)["image"]
    assert out.dtype == np.float32
    for channel in range(3):  # Pillow's float mode F, no clipping
        np.testing.assert_array_equal(out[..., channel], pil_resize(floats[..., channel], 37, 61, Image.BICUBIC))
    wide = (image.astype(np.uint16) * 257)
    out = resize(image=wide)["image"]
    assert out.dtype == np.uint16
    expected = np.clip(pil_resize(wide[..., 0].astype(np.int32), 37, 61, Image.BICUBIC), 0, 65535)
    np.testing.assert_array_equal(out[..., 0], expected)
    five = np.concatenate([image, image[..., :2]], axis=2)  # an RGBA-like count goes band by band, no premultiplying
    np.testing.assert_array_equal(resize(image=five)["image"][..., 3:], resize(image=image)["image"][..., :2])
    with pytest.raises(ConfigError, match="float64.*antialias: false"):
        resize(image=image.astype(np.float64))


def test_antialias_false_is_albumentations_opencv_resize():
    recipe = FINGERPRINTS["recipes"]["configs/synthesis/spade_cityscapes.yaml"]
    image = noise(*recipe["source_size"])
    labels = np.random.default_rng(1).integers(0, 35, recipe["source_size"], dtype=np.uint8)
    height, width = recipe["train"]["size"]
    ours = build_pipeline([{"type": "Resize", "height": height, "width": width, "interpolation": 2,
                            "antialias": False}])(image=image, mask=labels)
    theirs = A.Compose([A.Resize(height, width, interpolation=2)])(image=image, mask=labels)
    np.testing.assert_array_equal(ours["image"], theirs["image"])
    np.testing.assert_array_equal(ours["mask"], theirs["mask"])
    assert float(ours["image"].std()) == pytest.approx(recipe["train"]["std_opencv_unfiltered"], abs=0.01)


def test_antialias_takes_a_boolean_only():
    for value in ("yes", 1):
        with pytest.raises(ConfigError, match=r"antialias.*true or false") as raised:
            build_pipeline([{"type": "Resize", "height": 8, "width": 8, "antialias": value}])
        assert "\n" not in str(raised.value)

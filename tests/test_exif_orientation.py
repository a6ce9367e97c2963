"""Images carrying an EXIF orientation (phone photos): read as shown in every format, a mask
drawn on the stored pixels named as such, tools/check_dataset.py noting the turned images; and
images OpenCV cannot decode read with Pillow."""

import json

import cv2
import numpy as np
import pytest
from PIL import Image

from framework.data import ImageMaskFolder, read_rgb_image
from framework.data.folder import exif_orientation
from framework.errors import DataError
from support import REPO, call_tool

# How a viewer shows the stored pixels, per EXIF orientation, written out from the EXIF
# standard (independent of Pillow's and OpenCV's implementations).
SHOWN = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],  # mirrored left to right
    3: lambda a: a[::-1, ::-1],  # turned 180 degrees
    4: lambda a: a[::-1],  # mirrored top to bottom
    5: lambda a: a.transpose(1, 0, 2),  # transposed
    6: lambda a: np.rot90(a, -1),  # turned 90 degrees clockwise
    7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # transversed
    8: lambda a: np.rot90(a, 1),  # turned 90 degrees counter-clockwise
}


def write_oriented(path, pixels, orientation, **options):
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = orientation
    image.save(path, exif=exif, **options)


@pytest.mark.parametrize("suffix", [".png", ".webp", ".tif"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_lossless_images_are_read_as_their_orientation_shows_them(tmp_path, suffix, orientation):
    """TIFFs turned by 90 degrees (5-8) are the ones OpenCV 5 cannot decode: Pillow reads them."""
    stored = np.random.default_rng(orientation).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    path = tmp_path / f"photo{suffix}"
    write_oriented(path, stored, orientation, **({"lossless": True} if suffix == ".webp" else {}))
    read = read_rgb_image(str(path))
    assert read.dtype == np.uint8 and np.array_equal(read, SHOWN[orientation](stored))


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_jpegs_are_read_as_their_orientation_shows_them(tmp_path, orientation):
    stored = np.random.default_rng(orientation).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    path = tmp_path / "photo.jpg"
    write_oriented(path, stored, orientation, quality=95)
    decoded = cv2.imread(str(path), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)[..., ::-1]
    assert np.array_equal(read_rgb_image(str(path)), SHOWN[orientation](decoded))


def test_a_file_neither_library_reads_as_8_bit_rgb_is_one_data_error(tmp_path):
    deep = tmp_path / "deep.tif"  # 16-bit grey, turned by 90 degrees: OpenCV refuses it, Pillow's RGB would clip
    write_oriented(deep, np.arange(60, dtype=np.uint16).reshape(6, 10) * 1000, 6)
    with pytest.raises(DataError, match=rf"^{deep}: cannot read image \(OpenCV cannot decode it, and its Pillow "
                                        r"mode I;16 is not 8 bits per channel\)$"):
        read_rgb_image(str(deep))
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(DataError, match=rf"^{broken}: cannot read image \(missing, corrupt or not an image\)$"):
        read_rgb_image(str(broken))
    with pytest.raises(DataError, match=r"^.*nowhere\.png: cannot read image \(missing, corrupt or not an image\)$"):
        read_rgb_image(str(tmp_path / "nowhere.png"))


def make_folder(root, orientation, mask_shape, size=(24, 32), name="photo", uniform=False):
    """One sample: a `size` JPEG of noise (`uniform`: of one colour) stored with `orientation`, and
    a mask of `mask_shape` whose top-left quarter (as its rows and columns lie) is class 1."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(exist_ok=True)
    pixels = np.random.default_rng(orientation).integers(0, 256, (*size, 3), dtype=np.uint8)
    if uniform:
        pixels[:] = (200, 30, 30)
    write_oriented(root / "images" / f"{name}.jpg", pixels, orientation)
    mask = np.zeros(mask_shape, np.uint8)
    mask[: mask_shape[0] // 2, : mask_shape[1] // 2] = 1
    Image.fromarray(mask).save(root / "masks" / f"{name}.png")
    return ImageMaskFolder(str(root), classes=["background", "thing"])


def test_a_mask_drawn_on_the_image_as_shown_trains(tmp_path):
    sample = make_folder(tmp_path, 6, (32, 24))[0]
    assert tuple(sample["image"].shape) == (3, 32, 24) and tuple(sample["mask"].shape) == (32, 24)


def test_a_mask_drawn_on_the_stored_pixels_is_named_as_such(tmp_path):
    dataset = make_folder(tmp_path, 6, (24, 32))
    mask = tmp_path / "masks" / "photo.png"
    with pytest.raises(DataError, match=(
            rf"^{mask}: mask is 24x32 but its image is 32x24; the image is stored 24x32 with EXIF orientation 6 "
            r"\(turned 90 degrees clockwise when shown\) and is read as shown, as annotation tools show it, so the "
            r"mask was drawn on the stored pixels: turn the mask the same way, or save the image without its "
            r"orientation tag$")):
        dataset[0]


@pytest.mark.parametrize("orientation, mask_shape", [(1, (20, 32)), (3, (32, 24)), (6, (20, 32)), (8, (32, 20))])
def test_other_size_mismatches_get_no_orientation_hint(tmp_path, orientation, mask_shape):
    """Only a mask with the stored size of an image turned by 90 degrees is explained by the tag."""
    dataset = make_folder(tmp_path, orientation, mask_shape)
    shown = (32, 24) if orientation in (6, 8) else (24, 32)
    with pytest.raises(DataError, match=rf"^.*photo\.png: mask is {mask_shape[0]}x{mask_shape[1]} "
                                        rf"but its image is {shown[0]}x{shown[1]}$"):
        dataset[0]


def test_check_dataset_notes_turned_images_and_names_a_mask_on_stored_pixels(tmp_path):
    make_folder(tmp_path, 3, (24, 32), name="a")  # turned 180 degrees: the sizes cannot tell
    make_folder(tmp_path, 8, (32, 24), name="b")  # turned by 90 degrees, the mask drawn as shown
    make_folder(tmp_path, 2, (24, 32), size=(24, 32), name="c")  # mirrored
    make_folder(tmp_path, 1, (24, 32), name="d")  # no orientation
    make_folder(tmp_path, 3, (24, 32), name="f", uniform=True)  # turned 180 degrees, and the same either way
    config = tmp_path / "config.yaml"
    config.write_text(f"_base_: {REPO}/configs/segmentation/unet_shapes.yaml\n"
                      f"data:\n  train:\n    dataset: {{type: ImageMaskFolder, root: {tmp_path}, "
                      "classes: [background, thing]}\n")
    result = call_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json")
    assert result.returncode == 0, result.stdout + result.stderr
    note = ("note: 3 image(s) carry an EXIF orientation and are read turned by it, as viewers and annotation tools "
            "show them: a.jpg (turned 180 degrees), b.jpg (turned 90 degrees counter-clockwise), c.jpg (mirrored "
            "left to right). Their masks must be drawn on the image as shown; one drawn on the stored pixels is "
            "misaligned, and its size gives it away only when a non-square image is turned by 90 degrees")
    assert note in result.stdout.splitlines() and "no problems found" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exif_turned"] == [{"name": "a", "exif_orientation": 3}, {"name": "b", "exif_orientation": 8},
                                     {"name": "c", "exif_orientation": 2}]
    make_folder(tmp_path, 6, (24, 32), name="e")  # turned by 90 degrees, the mask drawn on the stored pixels
    result = call_tool("check_dataset", "--config", config)
    assert result.returncode == 1
    assert (f"{tmp_path}/masks/e.png: mask is 24x32 but its image is 32x24; the image is stored 24x32 with EXIF "
            "orientation 6 (turned 90 degrees clockwise when shown)") in result.stdout
    assert "1 problem(s)" in result.stdout and "note: 4 image(s) carry an EXIF orientation" in result.stdout


def test_check_dataset_reads_multichannel_images_as_training_does(tmp_path):
    """It read every image as RGB with OpenCV: each .npy image was "unreadable"."""
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for i in range(3):
        np.save(tmp_path / "images" / f"s{i}.npy", np.random.default_rng(i).random((12, 16, 4), dtype=np.float32))
        Image.fromarray(np.full((12, 16), i % 2, np.uint8)).save(tmp_path / "masks" / f"s{i}.png")
    config = tmp_path / "config.yaml"
    config.write_text(f"_base_: {REPO}/configs/segmentation/unet_shapes.yaml\n"
                      f"data:\n  train:\n    dataset: {{type: ImageMaskFolder, root: {tmp_path}, "
                      "classes: [a, b], channels: 4}\n")
    result = call_tool("check_dataset", "--config", config)
    assert result.returncode == 0, result.stdout
    assert "no problems found" in result.stdout and "image sizes (HxW): min_height 12" in result.stdout
    assert "EXIF" not in result.stdout


def test_a_channels_dataset_reads_the_stored_pixels_and_gets_no_orientation_hint(tmp_path):
    """`channels: N` reads images as stored (framework/data/channels.py), so the tag explains nothing."""
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    stored = np.random.default_rng(0).integers(0, 256, (24, 32, 4), dtype=np.uint8)  # RGBA
    write_oriented(tmp_path / "images" / "photo.png", stored, 6)
    Image.fromarray(np.zeros((32, 24), np.uint8)).save(tmp_path / "masks" / "photo.png")  # drawn as shown
    dataset = ImageMaskFolder(str(tmp_path), classes=["background", "thing"], channels=4)
    with pytest.raises(DataError, match=r"^.*photo\.png: mask is 32x24 but its image is 24x32$"):
        dataset[0]

    config = tmp_path / "config.yaml"
    config.write_text(f"_base_: {REPO}/configs/segmentation/unet_shapes.yaml\n"
                      f"data:\n  train:\n    dataset: {{type: ImageMaskFolder, root: {tmp_path}, "
                      "classes: [background, thing], channels: 4}\n")
    result = call_tool("check_dataset", "--config", config)
    assert result.returncode == 1 and "photo.png: mask is 32x24 but its image is 24x32\n" in result.stdout
    assert "EXIF" not in result.stdout  # read as stored: not turned


@pytest.mark.parametrize("tag", [0, 9, 65535])
def test_an_orientation_outside_the_standard_counts_as_none(tmp_path, tag):
    path = tmp_path / "photo.png"
    stored = np.random.default_rng(0).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    write_oriented(path, stored, tag)
    assert exif_orientation(str(path)) == 1 and np.array_equal(read_rgb_image(str(path)), stored)


def test_files_without_an_orientation_count_as_shown_as_stored(tmp_path):
    plain = tmp_path / "plain.png"
    Image.fromarray(np.zeros((4, 6, 3), np.uint8)).save(plain)  # no EXIF at all
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    assert exif_orientation(str(plain)) == 1 and exif_orientation(str(broken)) == 1
    assert exif_orientation(str(tmp_path / "nowhere.jpg")) == 1


def test_a_grey_tiff_is_read_as_rgb_and_one_turned_by_90_degrees_is_refused(tmp_path):
    """OpenCV 5 cannot decode a TIFF turned by 90 degrees, and Pillow 13 scrambles a grey one: refused."""
    stored = np.random.default_rng(0).integers(0, 256, (6, 10), dtype=np.uint8)
    path = tmp_path / "grey.tif"
    write_oriented(path, stored, 3)
    read = read_rgb_image(str(path))
    assert read.shape == (6, 10, 3) and all(np.array_equal(read[..., c], stored[::-1, ::-1]) for c in range(3))
    write_oriented(path, stored, 8)
    with pytest.raises(DataError, match=rf"^{path}: cannot read image \(OpenCV cannot decode a TIFF whose orientation "
                                        r"tag turns it by 90 degrees, and Pillow misreads a L one\); save it turned and "
                                        r"without the tag, or as RGB$"):
        read_rgb_image(str(path))


def test_a_16_bit_rgb_png_is_read_as_its_high_bytes(tmp_path):
    stored = np.random.default_rng(0).integers(0, 65536, (6, 10, 3), dtype=np.uint16)
    path = tmp_path / "deep.png"
    assert cv2.imwrite(str(path), stored[..., ::-1])  # OpenCV writes BGR
    assert np.array_equal(read_rgb_image(str(path)), (stored >> 8).astype(np.uint8))


def test_an_rgba_tiff_turned_by_90_degrees_is_refused(tmp_path):
    path = tmp_path / "alpha.tif"
    write_oriented(path, np.random.default_rng(0).integers(0, 256, (6, 10, 4), dtype=np.uint8), 6)
    with pytest.raises(DataError, match=r"Pillow misreads a RGBA one\); save it turned and without the tag, or as RGB$"):
        read_rgb_image(str(path))

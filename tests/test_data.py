"""The data layer: registered transforms, SyntheticShapes, folder datasets, mask checks, seeding."""

import pickle
import random
import re

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from PIL import Image

import framework  # noqa: F401  (fills the registries)
from framework.data import (
    ImageDataset,
    ImageMaskFolder,
    PairedImageDataset,
    SegmentationDataset,
    SyntheticShapes,
    VOCSegmentation,
    build_pipeline,
)
from framework.errors import ConfigError, DataError
from framework.registry import DATASETS, TRANSFORMS

RANDOM_PIPELINE = [
    {"type": "Affine", "rotate": (-40, 40), "translate_percent": (-0.1, 0.1), "p": 1.0},
    {"type": "RandomBrightnessContrast", "p": 1.0},
    {"type": "HorizontalFlip", "p": 0.5},
]


# ----------------------------------------------------------------------------- transforms


def test_albumentations_transforms_and_compositions_are_registered_by_class_name():
    for name in ("HorizontalFlip", "RandomCrop", "Normalize", "Affine", "CoarseDropout", "ToTensorV2"):
        assert name in TRANSFORMS
    for name in ("Compose", "OneOf", "SomeOf", "Sequential", "OneOrOther"):
        assert TRANSFORMS.get(name) is getattr(A, name)
    for base in ("BasicTransform", "DualTransform", "ImageOnlyTransform"):
        assert base not in TRANSFORMS


def test_build_pipeline_from_nodes_including_a_nested_one_of():
    pipeline = build_pipeline(
        [
            {"type": "RandomCrop", "height": 8, "width": 12},
            {"type": "OneOf", "transforms": [{"type": "HorizontalFlip"}, {"type": "VerticalFlip"}], "p": 1.0},
            A.Transpose(p=1.0),  # an already built transform mixes with nodes
        ]
    )
    assert isinstance(pipeline, A.Compose)
    crop, one_of, transpose = pipeline.transforms
    assert (crop.height, crop.width) == (8, 12)
    assert isinstance(one_of, A.OneOf) and one_of.p == 1.0
    assert [type(t) for t in one_of.transforms] == [A.HorizontalFlip, A.VerticalFlip]
    assert isinstance(transpose, A.Transpose)
    out = pipeline(image=np.zeros((20, 30, 3), np.uint8), mask=np.zeros((20, 30), np.uint8))
    assert out["image"].shape == (12, 8, 3) and out["mask"].shape == (12, 8)


def test_pipeline_build_errors_name_the_config_path():
    unknown = r"data\.train\.dataset\.pipeline\[1\]\.type: unknown type 'HorizontalFlp'.*did you mean 'HorizontalFlip'"
    with pytest.raises(ConfigError, match=unknown):
        build_pipeline([{"type": "VerticalFlip"}, {"type": "HorizontalFlp"}], path="data.train.dataset.pipeline")
    with pytest.raises(ConfigError, match=r"^pipeline\[0\]: expected an albumentations transform"):
        build_pipeline([42])
    # Through the dataset registry the path comes from the dataset node's own path.
    node = {
        "type": "SyntheticShapes",
        "num_samples": 4,
        "pipeline": [{"type": "HorizontalFlip"}, {"type": "VerticalFlip"}, {"type": "RandomCrop", "hieght": 8}],
    }
    with pytest.raises(ConfigError, match=r"data\.train\.dataset\.pipeline\[2\]\.hieght: RandomCrop has no param"):
        DATASETS.build(node, path="data.train.dataset")
    node["pipeline"][2] = {"type": "OneOf", "transforms": [{"type": "Nope"}]}
    with pytest.raises(ConfigError, match=r"data\.train\.dataset\.pipeline\[2\]\.transforms\[0\]\.type"):
        DATASETS.build(node, path="data.train.dataset")


def test_pipeline_that_changes_the_image_dtype_is_rejected():
    dataset = SyntheticShapes(num_samples=2, pipeline=[{"type": "Normalize"}])
    with pytest.raises(ConfigError, match="normalises images on the device"):
        dataset[0]


# ----------------------------------------------------------------------------- SyntheticShapes


def test_shapes_samples_have_the_documented_types_and_shapes():
    dataset = DATASETS.build({"type": "SyntheticShapes", "num_samples": 5, "size": [48, 80]})
    assert len(dataset) == 5
    assert dataset.class_names == ("background", "circle", "rectangle", "triangle")
    assert dataset.num_classes == 4 and dataset.ignore_index == 255 and len(dataset.palette) == 4
    sample = dataset[3]
    assert set(sample) == {"image", "mask", "index", "name"}
    assert sample["image"].dtype == torch.uint8 and sample["image"].shape == (3, 48, 80)
    assert sample["mask"].dtype == torch.int64 and sample["mask"].shape == (48, 80)
    assert sample["index"] == 3 and sample["name"] == "shapes_000003"
    with pytest.raises(IndexError):
        dataset[5]


def test_shapes_are_a_function_of_seed_and_index_only():
    first, second = SyntheticShapes(num_samples=10, seed=3), SyntheticShapes(num_samples=10, seed=3)
    second[7]  # reading other samples first must not matter
    for index in (0, 4):
        a, b = first[index], second[index]
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["mask"], b["mask"])
    assert not torch.equal(first[0]["image"], first[1]["image"])
    assert not torch.equal(first[0]["image"], SyntheticShapes(num_samples=10, seed=4)[0]["image"])


def test_shapes_cover_every_class_with_a_textured_background():
    dataset = SyntheticShapes(num_samples=40)
    counts = sum(np.bincount(dataset.load_sample(i)[1].ravel(), minlength=4) for i in range(40))
    assert len(counts) == 4 and (counts > 0.03 * counts.sum()).all()
    image, mask, _ = dataset.load_sample(0)
    assert image[mask == 0].std() > 10  # noise and gradient, not a flat colour


def test_shapes_classes_prefix_draws_fewer_kinds():
    dataset = SyntheticShapes(num_samples=20, classes=["background", "circle"])
    assert dataset.num_classes == 2
    assert set(np.unique(np.concatenate([dataset[i]["mask"].numpy().ravel() for i in range(20)]))) == {0, 1}
    with pytest.raises(ConfigError, match=r"ds \(SyntheticShapes\): classes must be a prefix"):
        DATASETS.build({"type": "SyntheticShapes", "classes": ["background", "triangle"]}, path="ds")


# ----------------------------------------------------------------------------- seeding


def test_seeded_items_depend_only_on_index_and_seed():
    dataset = SyntheticShapes(num_samples=8, pipeline=RANDOM_PIPELINE)
    first = dataset[(3, 11)]
    dataset[(5, 2)], dataset[1]  # other samples, seeded or not, in between
    again = dataset[(3, 11)]
    elsewhere = pickle.loads(pickle.dumps(SyntheticShapes(num_samples=8, pipeline=RANDOM_PIPELINE)))[(3, 11)]
    for other in (again, elsewhere):  # elsewhere: as a fresh worker process would load it
        assert torch.equal(first["image"], other["image"]) and torch.equal(first["mask"], other["mask"])
    assert not torch.equal(first["image"], dataset[(3, 12)]["image"])
    unseeded = [dataset[3]["image"] for _ in range(2)]
    assert not torch.equal(*unseeded)  # augmentation is random without a seed


def test_reseeding_keeps_transforms_independent():
    # With one seed per transform (Compose.set_random_seed) two p=0.5 flips always agree.
    image = np.arange(4, dtype=np.uint8).reshape(2, 2, 1).repeat(3, axis=2)
    dataset = _ArrayDataset(image, np.zeros((2, 2), np.uint8), pipeline=[A.HorizontalFlip(), A.VerticalFlip()])
    outcomes = {tuple(dataset[(0, seed)]["image"][0].flatten().tolist()) for seed in range(40)}
    assert len(outcomes) == 4


# ----------------------------------------------------------------------------- mask checks


class _ArrayDataset(SegmentationDataset):
    """One in-memory sample, to test the base class alone."""

    def __init__(self, image, mask, classes=("a", "b", "c", "d"), **kwargs):
        super().__init__(classes=classes, **kwargs)
        self.image, self.mask = image, mask

    def __len__(self):
        return 1

    def load_sample(self, index):
        return self.image, self.mask, "only"

    def mask_path(self, index):
        return "masks/0003.png"


def test_mask_values_outside_the_classes_name_the_file_and_values():
    image = np.zeros((4, 4, 3), np.uint8)
    mask = np.array([[0, 1, 2, 3], [255, 7, 9, 9], [0, 0, 0, 0], [0, 0, 0, 0]], np.uint8)
    with pytest.raises(DataError) as err:
        _ArrayDataset(image, mask)[0]
    assert str(err.value) == "masks/0003.png: mask values [7, 9] outside [0, 4) (ignore_index 255)"
    with pytest.raises(DataError, match=r"mask values \[300\] outside \[0, 4\)"):  # uint16 mask
        _ArrayDataset(image, np.full((4, 4), 300, np.uint16))[0]
    ok = _ArrayDataset(image, np.where(mask > 3, 255, mask))[0]["mask"]  # ignore_index is allowed
    assert ok.dtype == torch.int64 and ok[1, 0] == 255


def test_masks_of_another_size_or_dtype_are_data_errors():
    image = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(DataError, match=r"^masks/0003.png: mask is 4x5 but its image is 4x4$"):  # no hint here
        _ArrayDataset(image, np.zeros((4, 5), np.uint8))[0]
    with pytest.raises(DataError, match=r"masks/0003.png: mask holds float32 values, not integer class indices"):
        _ArrayDataset(image, np.zeros((4, 4), np.float32))[0]


# ----------------------------------------------------------------------------- folders


def _write_image(path, rgb=(200, 30, 30), size=(16, 24)):
    image = np.zeros((*size, 3), np.uint8)
    image[:] = rgb
    assert cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def _write_palette_mask(path, mask, palette_colors):
    png = Image.fromarray(mask, mode="P")
    png.putpalette([v for color in palette_colors for v in color])
    png.save(path)


def _make_voc(root):
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / sub).mkdir(parents=True)
    palette_mask = np.zeros((16, 24), np.uint8)
    palette_mask[2:6, 3:9] = 15  # person
    palette_mask[0] = 255  # VOC's "void" border
    index_mask = np.full((16, 24), 7, np.uint8)  # car
    _write_image(root / "JPEGImages" / "2007_000001.jpg")
    _write_palette_mask(root / "SegmentationClass" / "2007_000001.png", palette_mask, [(0, 0, 0)] * 256)
    _write_image(root / "JPEGImages" / "2007_000002.jpg", rgb=(20, 40, 220))
    assert cv2.imwrite(str(root / "SegmentationClass" / "2007_000002.png"), index_mask)
    (root / "ImageSets/Segmentation/train.txt").write_text("2007_000001\n2007_000002\n\n")
    (root / "ImageSets/Segmentation/val.txt").write_text("2007_000002\n")
    return palette_mask, index_mask


def test_voc_reads_palette_and_index_masks_and_rgb_images(tmp_path):
    palette_mask, index_mask = _make_voc(tmp_path)
    # The palette PNG's colours are all black: only palette indices can give these classes.
    assert Image.open(tmp_path / "SegmentationClass" / "2007_000001.png").mode == "P"
    dataset = DATASETS.build({"type": "VOCSegmentation", "root": str(tmp_path)})
    assert len(dataset) == 2 and dataset.num_classes == 21 and dataset.class_names[15] == "person"
    assert dataset.palette[:3] == [(0, 0, 0), (128, 0, 0), (0, 128, 0)]
    assert isinstance(dataset.names, np.ndarray) and dataset.names.dtype.kind == "U"
    first, second = dataset[0], dataset[1]
    assert first["name"] == "2007_000001" and np.array_equal(first["mask"].numpy(), palette_mask)
    assert np.array_equal(second["mask"].numpy(), index_mask)
    red = first["image"].float().mean(dim=(1, 2))
    assert red[0] > 150 and red[2] < 80  # RGB order, not OpenCV's BGR
    assert len(VOCSegmentation(tmp_path, split="val")) == 1


def test_voc_rejects_colour_masks_and_unreadable_images(tmp_path):
    _make_voc(tmp_path)
    colour_mask = tmp_path / "SegmentationClass" / "2007_000002.png"
    _write_image(colour_mask, rgb=(128, 0, 0))
    dataset = VOCSegmentation(tmp_path)
    with pytest.raises(DataError, match=rf"{colour_mask}: mask has 3 channels"):
        dataset[1]
    broken = tmp_path / "JPEGImages" / "2007_000001.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=rf"{broken}: cannot read image"):
        dataset[0]


def test_voc_missing_folders_files_and_split_fail_at_construction(tmp_path):
    with pytest.raises(DataError, match=rf"data folder not found: {tmp_path / 'nowhere'}$"):
        VOCSegmentation(tmp_path / "nowhere")
    _make_voc(tmp_path)
    with pytest.raises(DataError, match=r"split file not found: .*ImageSets/Segmentation/test\.txt"):
        VOCSegmentation(tmp_path, split="test")
    (tmp_path / "ImageSets/Segmentation/train.txt").write_text("2007_000001\n2007_000009\n")
    with pytest.raises(DataError, match=r"JPEGImages: no image \(\.jpg\) for 1 sample\(s\): 2007_000009"):
        VOCSegmentation(tmp_path)
    _write_image(tmp_path / "JPEGImages" / "2007_000009.jpg")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'SegmentationClass'}: no mask \(\.png\) for 1 sample\(s\): "
                                        r"2007_000009$"):
        VOCSegmentation(tmp_path)
    (tmp_path / "ImageSets/Segmentation/empty.txt").write_text("\n")
    with pytest.raises(DataError, match="split file lists no samples"):
        VOCSegmentation(tmp_path, split="empty")
    (tmp_path / "JPEGImages" / "2007_000001.jpg").rename(tmp_path / "elsewhere.jpg")
    for jpg in (tmp_path / "JPEGImages").iterdir():
        jpg.unlink()
    (tmp_path / "JPEGImages").rmdir()
    with pytest.raises(DataError, match=rf"data folder not found: {tmp_path / 'JPEGImages'}$"):
        VOCSegmentation(tmp_path)


def _make_folder(root, stems_images, stems_masks):
    (root / "images").mkdir()
    (root / "masks").mkdir()
    for name in stems_images:
        _write_image(root / "images" / name, size=(8, 8))
    for stem in stems_masks:
        assert cv2.imwrite(str(root / "masks" / f"{stem}.png"), np.full((8, 8), len(stem) % 3, np.uint8))


def test_image_mask_folder_pairs_files_by_stem(tmp_path):
    _make_folder(tmp_path, ["b.png", "a.jpg", "c.JPEG"], ["a", "b", "c"])
    (tmp_path / "images" / "notes.txt").write_text("not an image")
    dataset = ImageMaskFolder(tmp_path, classes=["x", "y", "z"], pipeline=[{"type": "HorizontalFlip"}])
    assert list(dataset.names) == ["a", "b", "c"] and dataset.image_files.dtype.kind == "U"
    assert dataset.num_classes == 3
    sample = dataset[2]
    assert sample["name"] == "c" and sample["image"].shape == (3, 8, 8) and (sample["mask"] == 1).all()
    (tmp_path / "val.txt").write_text("c\na\n")
    subset = ImageMaskFolder(tmp_path, classes=["x", "y", "z"], split_file="val.txt")
    assert list(subset.names) == ["c", "a"]
    (tmp_path / "b.txt").write_text("b\n")
    only_png = ImageMaskFolder(tmp_path, classes=["x", "y", "z"], img_suffix=".png", split_file="b.txt")
    assert list(only_png.names) == ["b"] and only_png.image_path(0).endswith("b.png")
    with pytest.raises(DataError, match=r"images: no image for 2 sample\(s\): c, a$"):  # a .jpg, c .JPEG
        ImageMaskFolder(tmp_path, classes=["x", "y", "z"], img_suffix=".png", split_file="val.txt")


def test_image_mask_folder_reports_unpaired_and_missing_files(tmp_path):
    _make_folder(tmp_path, ["a.png", "b.png"], ["a", "z"])
    with pytest.raises(DataError, match=r"images: no image for 1 sample\(s\): z"):
        ImageMaskFolder(tmp_path, classes=["x", "y"])
    (tmp_path / "masks" / "z.png").unlink()
    with pytest.raises(DataError, match=r"masks: no mask \(\.png\) for 1 sample\(s\): b"):
        ImageMaskFolder(tmp_path, classes=["x", "y"])
    with pytest.raises(DataError, match=rf"data folder not found: {tmp_path / 'labels'}$"):
        ImageMaskFolder(tmp_path, classes=["x", "y"], mask_dir="labels")
    with pytest.raises(DataError, match=r"split file not found: .*missing\.txt"):
        ImageMaskFolder(tmp_path, classes=["x", "y"], split_file="missing.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: no images"):
        ImageMaskFolder(tmp_path, classes=["x", "y"], img_dir="empty")


def test_folder_datasets_pass_their_labels_and_pipeline_on(tmp_path):
    """ignore_index, palette and pipeline reach the dataset (dropping one of them was unseen)."""
    _make_voc(tmp_path / "voc")
    index_mask = np.full((16, 24), 7, np.uint8)
    index_mask[:, :5] = 1
    assert cv2.imwrite(str(tmp_path / "voc" / "SegmentationClass" / "2007_000002.png"), index_mask)
    voc = VOCSegmentation(tmp_path / "voc", classes=["a", "b"], ignore_index=7, palette=[(1, 2, 3), (4, 5, 6)],
                          pipeline=[{"type": "HorizontalFlip", "p": 1.0}])
    assert voc.ignore_index == 7 and voc.palette == [(1, 2, 3), (4, 5, 6)]
    assert np.array_equal(voc[1]["mask"].numpy(), index_mask[:, ::-1])  # 7 ignored, not outside; flipped
    (tmp_path / "folder").mkdir()
    _make_folder(tmp_path / "folder", ["a.png"], ["a"])
    mask = np.full((8, 8), 9, np.uint8)
    mask[:, :4] = 0
    assert cv2.imwrite(str(tmp_path / "folder" / "masks" / "a.png"), mask)
    folder = ImageMaskFolder(tmp_path / "folder", classes=["x", "y"], ignore_index=9, palette=[(7, 7, 7), (8, 8, 8)],
                             pipeline=[{"type": "HorizontalFlip", "p": 1.0}])
    assert folder.ignore_index == 9 and folder.palette == [(7, 7, 7), (8, 8, 8)]
    assert np.array_equal(folder[0]["mask"].numpy(), mask[:, ::-1])
    with pytest.raises(DataError, match=r"^.*a\.png: mask values \[9\] outside \[0, 2\) \(ignore_index 255\)$"):
        ImageMaskFolder(tmp_path / "folder", classes=["x", "y"])[0]


def test_folder_messages_name_at_most_five_missing_samples(tmp_path):
    _make_folder(tmp_path, [f"{c}.png" for c in "abcdefg"], list("abcdefg"))
    (tmp_path / "five.txt").write_text("a\nv\nw\nx\ny\nz\n")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'images'}: no image for 5 sample\(s\): v, w, x, y, z$"):
        ImageMaskFolder(tmp_path, classes=["x", "y", "z"], split_file="five.txt")
    (tmp_path / "six.txt").write_text("a\nu\nv\nw\nx\ny\nz\n")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'images'}: no image for 6 sample\(s\): u, v, w, x, y, \.\.\.$"):
        ImageMaskFolder(tmp_path, classes=["x", "y", "z"], split_file="six.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=rf"^{tmp_path / 'empty'}: no images \(looked for \.jpg, \.jpeg, \.png, \.bmp, "
                                        r"\.tif, \.tiff\)$"):
        ImageMaskFolder(tmp_path, classes=["x", "y"], img_dir="empty")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'empty'}: no images \(looked for \.webp\)$"):
        ImageMaskFolder(tmp_path, classes=["x", "y"], img_dir="empty", img_suffix=".webp")


@pytest.mark.parametrize("channels", [0, -2, True, "3", 2.0])
def test_channels_must_be_a_positive_integer(tmp_path, channels):
    _make_folder(tmp_path, ["a.png"], ["a"])
    with pytest.raises(ValueError, match=rf"^channels must be a positive integer \(or null for RGB\), got "
                                         rf"{re.escape(repr(channels))}$"):
        ImageMaskFolder(tmp_path, classes=["x", "y"], channels=channels)


def test_duplicate_names_collected_keep_every_other_sample(tmp_path):
    """tools/check_dataset.py lists duplicates and checks the rest: none may be dropped."""
    from framework.data.folder import duplicate_names_collected

    _make_folder(tmp_path, [f"s{i}.png" for i in range(12)] + ["s3.jpg", "s7.jpg"], [f"s{i}" for i in range(12)])
    with duplicate_names_collected() as duplicates:
        dataset = ImageMaskFolder(tmp_path, classes=["x", "y", "z"])
    assert sorted(dataset.names) == sorted(f"s{i}" for i in range(12))
    assert len(duplicates) == 2
    for stem, problem in zip(("s3", "s7"), sorted(duplicates)):  # the file seen first is kept, the other named
        assert re.fullmatch(rf"{tmp_path / 'images'}: both {stem}\.(png|jpg) and {stem}\.(png|jpg) are named {stem}; "
                            "keep one", problem) and problem.count(".png") == problem.count(".jpg") == 1
    with pytest.raises(DataError, match=r"^.*images: both s[37]\.(png|jpg) and s[37]\.(png|jpg) are named s[37]; keep one$"):
        ImageMaskFolder(tmp_path, classes=["x", "y", "z"])


def test_masks_that_cannot_be_read_are_named(tmp_path):
    from framework.data.folder import read_index_mask

    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    with pytest.raises(DataError, match=rf"^{broken}: cannot read mask \(cannot identify image file .*\)$"):
        read_index_mask(str(broken))
    colours = tmp_path / "colours.png"
    _write_image(colours)
    with pytest.raises(DataError, match=rf"^{colours}: mask has 3 channels; masks must hold class indices, as a "
                                        r"palette PNG or a single-channel PNG, not colours$"):
        read_index_mask(str(colours))


def test_infer_inputs_combine_files_folders_and_recursive_globs(tmp_path):
    from framework.data.folder import list_inputs

    for name in ("one/a.png", "one/b.jpg", "one/notes.txt", "two/deep/deeper/c.png", "d.bmp"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        _write_image(tmp_path / name, size=(4, 4)) if not name.endswith(".txt") else (tmp_path / name).write_text("x")
    found = list_inputs([str(tmp_path / "d.bmp"), str(tmp_path / "one"), str(tmp_path / "two" / "**" / "*")])
    assert found == [tmp_path / "d.bmp", tmp_path / "one/a.png", tmp_path / "one/b.jpg", tmp_path / "two/deep/deeper/c.png"]
    with pytest.raises(DataError, match=rf"^--input {tmp_path / 'nowhere'}: no such file or folder, and no file matches it$"):
        list_inputs([str(tmp_path / "nowhere")])
    with pytest.raises(DataError, match=rf"^--input {re.escape(str(tmp_path / 'one/*.txt'))} "
                                        rf"{re.escape(str(tmp_path / 'two'))}: no images "
                                        r"\(\.jpg, \.jpeg, \.png, \.bmp, \.tif, \.tiff\)$"):
        list_inputs([str(tmp_path / "one/*.txt"), str(tmp_path / "two")])  # a folder's own images only


class _NamelessPathDataset(_ArrayDataset):
    mask_path = SegmentationDataset.mask_path  # the base's: no file behind the sample


def test_base_class_checks_name_the_sample_and_every_wrong_property():
    image, mask = np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.uint8)
    with pytest.raises(DataError, match=r"^only: expected an HxWx3 uint8 image, got float32 \(4, 4, 3\)$"):
        _ArrayDataset(image.astype(np.float32), mask)[0]  # the dtype alone is wrong
    with pytest.raises(DataError, match=r"^only: expected an HxWx3 uint8 image, got uint8 \(4, 4, 4\)$"):
        _ArrayDataset(np.zeros((4, 4, 4), np.uint8), mask)[0]  # the channels alone
    with pytest.raises(DataError, match=r"^_NamelessPathDataset\[0\]: mask holds float64 values, not integer "
                                        r"class indices$"):
        _NamelessPathDataset(image, mask.astype(np.float64))[0]
    with pytest.raises(DataError, match=r"^masks/0003.png: mask values \[4\] outside \[0, 4\) \(ignore_index 255\)$"):
        _ArrayDataset(image, np.full((4, 4), 4, np.uint8))[0]  # one past the last class
    with pytest.raises(ValueError, match=r"^classes must list the class names, e.g. \[background, road, car\]$"):
        _ArrayDataset(image, mask, classes=())
    with pytest.raises(ValueError, match=r"^palette needs one RGB triple per class \(2\), got \[\(1, 2, 3\), \(4, 5\)\]$"):
        _ArrayDataset(image, mask, classes=("a", "b"), palette=[(1, 2, 3), (4, 5)])  # enough entries, one short


def test_a_pipeline_turning_images_into_floats_is_named():
    image, mask = np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.uint8)
    with pytest.raises(ConfigError, match=r"^the pipeline of _ArrayDataset turned the image into torch.float32; keep "
                                          r"it uint8 \(no Normalize/ToFloat\): the task normalises images on the "
                                          r"device$"):
        _ArrayDataset(image, mask, pipeline=[{"type": "ToFloat"}, {"type": "ToTensorV2"}])[0]
    sample = _ArrayDataset(image, mask, pipeline=[{"type": "ToTensorV2"}])[0]  # a tensor pipeline end
    assert sample["image"].dtype == torch.uint8 and sample["mask"].dtype == torch.int64


def test_numpy_drawn_augmentations_are_reproducible_per_sample_and_seed():
    """GaussNoise draws from the numpy generator (flips and affine parameters from Python's):
    the reseeding must set both."""
    image = np.full((8, 8, 3), 128, np.uint8)
    dataset = _ArrayDataset(image, np.zeros((8, 8), np.uint8), pipeline=[{"type": "GaussNoise", "p": 1.0}])
    first, again, other = dataset[(0, 5)]["image"], dataset[(0, 5)]["image"], dataset[(0, 6)]["image"]
    assert torch.equal(first, again) and not torch.equal(first, other) and not torch.equal(first, torch.full_like(first, 128))


def test_sample_streams_are_splitmix64_and_pin_both_generators():
    """The per-sample streams are part of exact resume (a checkpoint of 0.2.0 resumes bit for bit):
    mix64 over a splitmix64 counter gives the published splitmix64 outputs (Vigna's reference,
    seeds 0 and 1234567); each sample's numpy PCG64 and Python generators start from its words."""
    from framework.data.base import mix64, stream_words

    def splitmix64(state, count):
        for _ in range(count):
            state = (state + 0x9E3779B97F4A7C15) % 2**64
            yield mix64(state)

    assert [hex(v) for v in splitmix64(0, 3)] == ["0xe220a8397b1dcdaf", "0x6e789e6aa1b965f4", "0x6c45d188009454f"]
    assert list(splitmix64(1234567, 5)) == [6457827717110365317, 3203168211198807973, 9817491932198370423,
                                            4593380528125082431, 16408922859458223821]
    words = stream_words(11, 3, 5)
    assert words == list(splitmix64(mix64(mix64(11) ^ 3), 5)) and words != stream_words(11, 4, 5) != stream_words(12, 3, 5)
    dataset = _ArrayDataset(np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.uint8), pipeline=[{"type": "HorizontalFlip"}])
    dataset._reseed(3, 11)  # what dataset[(3, 11)] does before its pipeline draws
    numpy_random, python_random = dataset._random_streams
    assert numpy_random.bit_generator.state["state"] == {"state": words[0] << 64 | words[1],
                                                          "inc": words[2] << 64 | words[3] | 1}
    assert numpy_random.bit_generator.state["has_uint32"] == 0
    assert python_random.getstate() == random.Random(words[4]).getstate()


def test_a_gan_dataset_turning_images_into_floats_is_named_too():
    """Image datasets have no `channels`: the same message, not an AttributeError."""
    from framework.data.images import PairedImageDataset

    class Pairs(PairedImageDataset):
        def __len__(self):
            return 1

        def load_pair(self, index):
            return np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.uint8), "p"

    with pytest.raises(ConfigError, match=r"^the pipeline of Pairs turned the image into torch.float32; keep it uint8"):
        Pairs(pipeline=[{"type": "ToFloat"}])[0]


class _Pairs(PairedImageDataset):
    def __init__(self, source, target, **kwargs):
        super().__init__(**kwargs)
        self.source, self.target = source, target

    def __len__(self):
        return 1

    def load_pair(self, index):
        return self.source, self.target, "pair"


class _Images(ImageDataset):
    def __init__(self, image, **kwargs):
        super().__init__(**kwargs)
        self.image = image

    def __len__(self):
        return 1

    def load_image(self, index):
        return self.image, "single"


def test_gan_datasets_are_reseeded_per_sample_and_augment_both_halves_alike():
    """Given the training sampler's (index, seed), the same augmentation again for the same pair
    and seed, and the target flipped with its input; a single image's noise reseeded too."""
    source = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    pipeline = [{"type": "HorizontalFlip", "p": 0.5}, {"type": "GaussNoise", "p": 1.0}]
    pairs = _Pairs(source, source.copy(), pipeline=[pipeline[0]])
    flips = {seed: torch.equal(pairs[(0, seed)]["input"], torch.from_numpy(source[:, ::-1].copy()).permute(2, 0, 1))
             for seed in range(12)}
    assert set(flips.values()) == {True, False}  # some seeds flip, some do not
    for seed in range(12):
        sample = pairs[(0, seed)]
        assert sample["index"] == 0 and torch.equal(sample["input"], sample["target"])  # flipped together
        assert flips[seed] == torch.equal(sample["input"], torch.from_numpy(source[:, ::-1].copy()).permute(2, 0, 1))
    noisy = _Images(source, pipeline=pipeline)
    assert torch.equal(noisy[(0, 3)]["image"], noisy[(0, 3)]["image"]) and noisy[(0, 3)]["index"] == 0
    assert not torch.equal(noisy[(0, 3)]["image"], noisy[(0, 4)]["image"])


def test_gan_datasets_name_what_is_wrong_with_an_image():
    rgb = np.zeros((4, 6, 3), np.uint8)
    with pytest.raises(DataError, match=r"^pair \(input\): expected an HxWx3 uint8 image, got float32 \(4, 6, 3\)$"):
        _Pairs(rgb.astype(np.float32), rgb)[0]  # the dtype alone
    with pytest.raises(DataError, match=r"^pair \(target\): expected an HxWx3 uint8 image, got uint8 \(4, 6, 4\)$"):
        _Pairs(rgb, np.zeros((4, 6, 4), np.uint8))[0]  # the channels alone
    with pytest.raises(DataError, match=r"^pair: input is 4x6 but its target is 5x7$"):
        _Pairs(rgb, np.zeros((5, 7, 3), np.uint8))[0]
    with pytest.raises(DataError, match=r"^single: expected an HxWx3 uint8 image, got uint8 \(4, 6\)$"):
        _Images(np.zeros((4, 6), np.uint8))[0]

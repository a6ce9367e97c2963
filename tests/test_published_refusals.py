"""The published readers' refusals, each one line naming the file and the value (or the expected
name): label values outside the dataset's range, unpaired image and label files, an empty split,
labelTrainIds under the labelIds name, RGB colour masks, the full ADE20K release; and what keeps
them cheap: 20k files listed in under 2 s, no label map held by the dataset."""

import os
import re
import shutil
import time

import numpy as np
import pytest
from PIL import Image

import framework  # noqa: F401  (fills the registries)
from framework.data.published.fixture_trees import write_fixture_tree
from framework.errors import DataError
from framework.registry import DATASETS


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("pristine")
    return {layout: write_fixture_tree(layout, out / layout, samples=3) for layout in ("cityscapes", "ade20k",
                                                                                    "cocostuff")}


@pytest.fixture
def trees(pristine, tmp_path):
    """A copy of each tree the test may spoil."""
    return {layout: shutil.copytree(root, tmp_path / layout / root.name) for layout, root in pristine.items()}


def build(kind, root, **extra):
    return DATASETS.build({"type": kind, "root": str(root), **extra})


def save(path, array):
    Image.fromarray(array).save(path)


def test_a_label_value_outside_the_datasets_range_names_the_file_and_value(trees):
    for kind, value, what in (("Cityscapes", 40, r"the labelIds 0\.\.33 of Cityscapes"),
                              ("ADE20K", 151, r"ADE20K's 0\.\.150 \(0 = other\)"),
                              ("COCOStuff", 200, r"COCO-Stuff's ids 0\.\.181 and 255 \(unlabeled\)")):
        dataset = build(kind, trees[kind.lower()])
        labels = np.asarray(Image.open(dataset.mask_path(1))).copy()
        labels[3, 5] = value
        save(dataset.mask_path(1), labels)
        with pytest.raises(DataError, match=rf"^{dataset.mask_path(1)}: label value\(s\) \[{value}\] outside {what}$"):
            dataset[1]
        dataset[0]  # the others still read


def test_unpaired_files_are_named_with_their_counts(trees):
    root = trees["cityscapes"]
    labels = sorted((root / "gtFine/train").rglob("*_gtFine_labelIds.png"))
    for path in labels[:2]:
        path.unlink()
    stray = root / "gtFine/train/aachen/aachen_000099_000099_gtFine_labelIds.png"
    save(stray, np.zeros((4, 4), np.uint8))
    lone = sorted(p.name[: -len("_gtFine_labelIds.png")] for p in labels[:2])
    with pytest.raises(DataError, match=rf"\(Cityscapes\): unpaired files: 2 of 3 image\(s\) in {root}/leftImg8bit/train have no "
                                        rf"\*_gtFine_labelIds.png in {root}/gtFine/train: {lone[0]}, {lone[1]}; 1 of 2 "
                                        r"label file\(s\) .* have no \*_leftImg8bit.png .*: aachen_000099_000099$"):
        build("Cityscapes", root)


def test_a_wrong_root_split_or_missing_folder_is_named(trees, tmp_path):
    root = trees["cityscapes"]
    with pytest.raises(DataError, match=rf"{tmp_path / 'nowhere'}: folder not found \(Cityscapes root\)$"):
        build("Cityscapes", tmp_path / "nowhere")
    with pytest.raises(DataError, match=rf"{root}/leftImg8bit/leftImg8bit/train: folder not found "
                                        r"\(leftImg8bit/<split> of leftImg8bit_trainvaltest.zip\)$"):
        build("Cityscapes", root / "leftImg8bit")
    with pytest.raises(Exception, match=r"split must be one of train, val, test for Cityscapes, got 'testing'$"):
        build("Cityscapes", root, split="testing")
    assert len(build("Cityscapes", root, split="test")) == 3 and build("Cityscapes", root).published_count == 2975
    shutil.rmtree(root / "gtFine" / "val")
    with pytest.raises(DataError, match=rf"{root}/gtFine/val: folder not found \(gtFine/<split> of "
                                        r"gtFine_trainvaltest.zip\)$"):
        build("Cityscapes", root, split="val")


def test_converted_files_hold_only_the_converted_values(trees):
    from framework.data.published.cityscapes import LABEL_ID_TO_TRAIN_ID

    root = trees["cityscapes"]
    dataset = build("Cityscapes", root, split="val")
    converted = dataset.mask_path(0).replace("_labelIds.png", "_labelTrainIds.png")
    for index in range(len(dataset)):
        labels = np.asarray(Image.open(dataset.mask_path(index)))
        save(dataset.mask_path(index).replace("_labelIds.png", "_labelTrainIds.png"), LABEL_ID_TO_TRAIN_ID[labels])
    save(converted, np.full((32, 64), 19, np.uint8))
    with pytest.raises(DataError, match=rf"^{converted}: label value\(s\) \[19\] outside the trainIds 0\.\.18 and 255 "
                                        r"of a labelTrainIds file$"):
        build("Cityscapes", root, split="val", label_files="labelTrainIds")[0]


def test_an_empty_split_is_refused_naming_the_folder(trees):
    images = trees["ade20k"] / "images" / "validation"
    for path in images.iterdir():
        path.unlink()
    with pytest.raises(DataError, match=rf"\(ADE20K\): {images}: no images \(\*\.jpg\): an empty split"):
        build("ADE20K", trees["ade20k"], split="val")


def test_label_train_ids_under_the_label_ids_name_are_refused(trees):
    dataset = build("Cityscapes", trees["cityscapes"])
    path = dataset.mask_path(0)
    train_ids = np.full((32, 64), 255, np.uint8)
    train_ids[:, :19] = np.arange(19)
    save(path, train_ids)
    values = ", ".join(str(v) for v in range(19))
    with pytest.raises(DataError, match=re.escape(
            f"{path}: holds only [{values}, 255], the values of a labelTrainIds map (trainIds 0..18, 255 ignored), "
            "not labelIds 0..33: put the published *_gtFine_labelIds.png files back, or read converted files with "
            "label_files: labelTrainIds") + "$"):
        dataset[0]
    train_ids[0, 0] = 19  # a labelId above the trainIds: no trainIds map, and 255 is no labelId
    save(path, train_ids)
    with pytest.raises(DataError, match=rf"^{path}: label value\(s\) \[255\] outside the labelIds 0\.\.33 of Cityscapes$"):
        dataset[0]
    # a true labelIds map of the same values without 255 is fine (0..18 are labelIds too)
    save(path, train_ids.clip(0, 18))
    dataset[0]


def test_rgb_colour_masks_are_refused_where_index_maps_are_expected(trees):
    dataset = build("Cityscapes", trees["cityscapes"])
    path = dataset.mask_path(0)
    shutil.copy(path.replace("_labelIds.png", "_color.png"), path)  # the visualisation under the labels' name
    with pytest.raises(DataError, match=rf"^{path}: an RGB colour image, not an index map; expected "
                                        r"\*_gtFine_labelIds.png"):
        dataset[0]
    ade = build("ADE20K", trees["ade20k"])
    save(ade.mask_path(2), np.zeros((32, 48, 3), np.uint8))
    with pytest.raises(DataError, match=rf"^{ade.mask_path(2)}: an RGB colour image, not an index map"):
        ade[2]


def test_colour_files_are_never_read_as_labels(trees):
    root = trees["cityscapes"]
    for path in (root / "gtFine/val").rglob("*_gtFine_labelIds.png"):
        path.unlink()  # only *_color.png (and instanceIds) left beside the images
    with pytest.raises(DataError, match=r"unpaired files: 3 of 3 image\(s\) .* have no \*_gtFine_labelIds.png"):
        build("Cityscapes", root, split="val")


def test_the_full_ade20k_release_is_refused_as_another_dataset(tmp_path):
    full = tmp_path / "ADE20K_2021_17_01"
    (full / "images/ADE/training/urban/street").mkdir(parents=True)
    save(full / "images/ADE/training/urban/street/ADE_train_00000001_seg.png", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(DataError, match=rf"\(ADE20K\): {full}: the full ADE20K release \(.*ADE_train_00000001_seg.png; "
                                        r".*a different dataset: download ADEChallengeData2016.zip"):
        build("ADE20K", full)
    (full / "index_ade20k.pkl").write_bytes(b"")
    with pytest.raises(DataError, match=r"the full ADE20K release \(.*index_ade20k.pkl"):
        build("ADE20K", full)


def test_synthesis_with_converted_train_ids_is_refused(pristine):
    with pytest.raises(Exception, match="labelTrainIds has lost the 35 labelIds that labels: synthesis reads"):
        build("Cityscapes", pristine["cityscapes"], labels="synthesis", label_files="labelTrainIds")


def test_twenty_thousand_files_list_in_under_two_seconds_and_no_map_is_held(tmp_path):
    root = tmp_path / "ADEChallengeData2016"
    images, annotations = root / "images/training", root / "annotations/training"
    images.mkdir(parents=True)
    annotations.mkdir(parents=True)
    for k in range(1, 20211):  # empty files: listing reads names, not contents
        os.close(os.open(images / f"ADE_train_{k:08d}.jpg", os.O_CREAT | os.O_WRONLY))
        os.close(os.open(annotations / f"ADE_train_{k:08d}.png", os.O_CREAT | os.O_WRONLY))
    start = time.perf_counter()
    dataset = build("ADE20K", root)
    assert time.perf_counter() - start < 2.0
    assert len(dataset) == 20210 and dataset.published_count == 20210
    held = [name for name, value in vars(dataset).items()
            if isinstance(value, np.ndarray) and value.dtype.kind != "U" and value.size > 256]
    assert held == []  # paths (strings) and 256-entry tables only: maps are read one sample at a time


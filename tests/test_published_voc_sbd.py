"""Pascal VOC with SBD's extra labels: trainaug's set arithmetic, which map each name takes (VOC's
palette PNG for a name of VOC's train list, SBD's .mat for the others), the .mat reading, VOC's
palette PNGs read as class indices, and the refusals of a wrong SBD folder or .mat file."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy.io import loadmat, savemat

import framework  # noqa: F401  (fills the registries)
from framework.data.published.fixture_trees import write_fixture_tree
from framework.data.published.voc import read_sbd_mat, trainaug_names
from framework.errors import ConfigError, DataError
from framework.registry import DATASETS


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_fixture_tree("voc_sbd", tmp_path_factory.mktemp("voc_sbd"))


def trainaug(tree, **extra):
    return DATASETS.build({"type": "VOCSegmentation", "root": str(tree / "VOCdevkit/VOC2012"), "split": "trainaug",
                           "sbd_root": str(tree / "benchmark_RELEASE"), **extra})


def listed(path) -> list[str]:
    return path.read_text().split()


def test_trainaug_is_voc_train_and_sbd_less_voc_val(tree):
    voc, sbd = tree / "VOCdevkit/VOC2012/ImageSets/Segmentation", tree / "benchmark_RELEASE/dataset"
    voc_train, voc_val = listed(voc / "train.txt"), listed(voc / "val.txt")
    sbd_all = listed(sbd / "train.txt") + listed(sbd / "val.txt")
    dataset = trainaug(tree)
    names = list(dataset.names)
    # written out: a (VOC train only), b and c (VOC train and SBD), f g h (SBD only); d e (VOC val) left out
    assert names == ["2007_000a", "2007_000b", "2007_000c", "2007_000f", "2007_000g", "2007_000h"]
    assert set(names) == (set(voc_train) | set(sbd_all)) - set(voc_val)
    assert trainaug_names(["x", "y"], ["y", "z"], ["z", "w"], ["v", "x"]) == ["v", "w", "x"]


def test_each_trainaug_name_takes_vocs_map_when_voc_trains_on_it_else_sbds(tree):
    dataset = trainaug(tree)
    voc_train = listed(tree / "VOCdevkit/VOC2012/ImageSets/Segmentation/train.txt")
    for index, name in enumerate(dataset.names):
        path = dataset.mask_path(index)
        mask = dataset[index]["mask"].numpy()
        if name in voc_train:
            assert path.endswith(f"SegmentationClass/{name}.png")
            np.testing.assert_array_equal(mask, np.asarray(Image.open(path)))
            assert (mask[0] == 255).all()  # VOC's border kept
        else:
            assert path.endswith(f"dataset/cls/{name}.mat")
            written = loadmat(path)["GTcls"][0, 0]["Segmentation"]
            np.testing.assert_array_equal(mask, written)
    # b is in SBD too, with another map: VOC's won
    both = list(dataset.names).index("2007_000b")
    sbd_map = loadmat(tree / "benchmark_RELEASE/dataset/cls/2007_000b.mat")["GTcls"][0, 0]["Segmentation"]
    assert not np.array_equal(dataset[both]["mask"].numpy(), sbd_map)


def test_sbd_mat_is_read_as_its_class_map(tmp_path):
    segmentation = np.arange(20, dtype=np.uint8).reshape(4, 5)
    savemat(str(tmp_path / "x.mat"), {"GTcls": {"Segmentation": segmentation, "CategoriesPresent": np.uint8(3)}})
    read = read_sbd_mat(str(tmp_path / "x.mat"))
    assert read.dtype == np.uint8
    np.testing.assert_array_equal(read, segmentation)
    savemat(str(tmp_path / "bad.mat"), {"GTcls": {"Segmentation": segmentation + 30}})
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'bad.mat'}: label value(s) {list(range(30, 40))} "
                                                  "outside SBD's class ids 0..20") + "$"):
        read_sbd_mat(str(tmp_path / "bad.mat"))
    savemat(str(tmp_path / "21.mat"), {"GTcls": {"Segmentation": np.full((2, 2), 21, np.uint8)}})
    with pytest.raises(DataError, match=r"label value\(s\) \[21\] outside SBD's class ids 0\.\.20$"):
        read_sbd_mat(str(tmp_path / "21.mat"))
    savemat(str(tmp_path / "float.mat"), {"GTcls": {"Segmentation": segmentation.astype(float)}})
    with pytest.raises(DataError, match=rf"^{tmp_path / 'float.mat'}: GTcls.Segmentation is float64 \(4, 5\), not an "
                                        r"H x W map of class ids$"):
        read_sbd_mat(str(tmp_path / "float.mat"))
    savemat(str(tmp_path / "inst.mat"), {"GTinst": {"Segmentation": segmentation}})
    with pytest.raises(DataError, match=rf"^{tmp_path / 'inst.mat'}: cannot read SBD's GTcls.Segmentation"):
        read_sbd_mat(str(tmp_path / "inst.mat"))


def test_voc_palette_pngs_are_read_as_class_indices(tree):
    dataset = DATASETS.build({"type": "VOCSegmentation", "root": str(tree / "VOCdevkit/VOC2012"), "split": "val"})
    for index in range(len(dataset)):
        opened = Image.open(dataset.mask_path(index))
        assert opened.mode == "P"
        indices = np.asarray(opened)
        np.testing.assert_array_equal(dataset[index]["mask"].numpy(), indices)
        # the colours differ from the indices: a reader of colours would get other numbers
        assert not np.array_equal(np.asarray(opened.convert("L")), indices)


def test_trainaug_refuses_a_missing_or_wrong_sbd_folder(tree, tmp_path):
    root = str(tree / "VOCdevkit/VOC2012")
    with pytest.raises(ConfigError, match="VOCSegmentation\\): split: trainaug needs sbd_root"):
        DATASETS.build({"type": "VOCSegmentation", "root": root, "split": "trainaug"})
    with pytest.raises(DataError, match=rf"sbd_root {tmp_path}: no dataset/cls/ folder"):
        DATASETS.build({"type": "VOCSegmentation", "root": root, "split": "trainaug", "sbd_root": str(tmp_path)})
    with pytest.raises(ConfigError, match="sbd_root is read by split: trainaug only, not split: val"):
        DATASETS.build({"type": "VOCSegmentation", "root": root, "split": "val", "sbd_root": str(tree)})


def test_trainaug_names_the_missing_sbd_maps_voc_masks_and_images(tree, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    (copy / "benchmark_RELEASE/dataset/cls/2007_000g.mat").unlink()
    with pytest.raises(DataError, match=rf"{copy}/benchmark_RELEASE/dataset/cls: no SBD class map \(\.mat\) for 1 "
                                        r"sample\(s\): 2007_000g$"):
        trainaug(copy)
    shutil.copy(tree / "benchmark_RELEASE/dataset/cls/2007_000g.mat", copy / "benchmark_RELEASE/dataset/cls")
    (copy / "VOCdevkit/VOC2012/SegmentationClass/2007_000a.png").unlink()  # a VOC train name: VOC's map
    with pytest.raises(DataError, match=rf"{copy}/VOCdevkit/VOC2012/SegmentationClass: no mask \(\.png\) for 1 "
                                        r"sample\(s\): 2007_000a$"):
        trainaug(copy)
    shutil.copy(tree / "VOCdevkit/VOC2012/SegmentationClass/2007_000a.png", copy / "VOCdevkit/VOC2012/SegmentationClass")
    (copy / "VOCdevkit/VOC2012/JPEGImages/2007_000h.jpg").unlink()  # an SBD name: its image is VOC's too
    with pytest.raises(DataError, match=rf"{copy}/VOCdevkit/VOC2012/JPEGImages: no image \(\.jpg\) for 1 "
                                        r"sample\(s\): 2007_000h$"):
        trainaug(copy)
    assert len(trainaug(tree)) == 6 and trainaug(tree).palette[:2] == [(0, 0, 0), (128, 0, 0)]


def test_sbd_root_may_be_the_dataset_folder_itself_and_counts_are_the_published_ones(tree):
    inner = DATASETS.build({"type": "VOCSegmentation", "root": str(tree / "VOCdevkit/VOC2012"), "split": "trainaug",
                            "sbd_root": str(tree / "benchmark_RELEASE/dataset")})
    outer = trainaug(tree)
    assert [inner.mask_path(i) for i in range(len(inner))] == [outer.mask_path(i) for i in range(len(outer))]
    assert outer.published_count == 10582
    val = DATASETS.build({"type": "VOCSegmentation", "root": str(tree / "VOCdevkit/VOC2012"), "split": "val"})
    assert val.published_count == 1449 and len(val) == 2


@pytest.mark.parametrize("split", ["train", "trainaug"])
def test_upper_case_suffixes_are_read_as_named_and_a_missing_image_is_one_line(tree, tmp_path, capfd, split):
    """JPEGImages/*.JPG matched the list's names without case, then were opened as <name>.jpg: OpenCV's
    "can't open/read file" warnings on stderr before the refusal."""
    root = shutil.copytree(tree, tmp_path / "copy")
    expected = trainaug(tree) if split == "trainaug" else DATASETS.build(
        {"type": "VOCSegmentation", "root": str(tree / "VOCdevkit/VOC2012"), "split": split})
    for path in [*(root / "VOCdevkit/VOC2012/JPEGImages").glob("*.jpg"), *(root / "benchmark_RELEASE").rglob("*.mat")]:
        path.rename(path.with_suffix(path.suffix.upper()))
    dataset = trainaug(root) if split == "trainaug" else DATASETS.build(
        {"type": "VOCSegmentation", "root": str(root / "VOCdevkit/VOC2012"), "split": split})
    for index in range(len(dataset)):
        assert dataset.image_path(index).endswith(".JPG")
        np.testing.assert_array_equal(dataset.read_mask(index), expected.read_mask(index))
        np.testing.assert_array_equal(dataset.read_image(index), expected.read_image(index))
    capfd.readouterr()
    missing = dataset.image_path(0)
    Path(missing).unlink()
    with pytest.raises(DataError, match=rf"^{re.escape(missing)}: cannot read image"):
        dataset[0]
    assert "WARN" not in capfd.readouterr().err

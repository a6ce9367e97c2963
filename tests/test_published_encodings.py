"""The readers tell a dataset's expected encoding from another one of the same values, where one
map alone would pass the range check and train on shifted classes without a word: COCO-Stuff in
1-based ids (cocostuffapi's cocoSegmentationToPng writes each pixel's COCO category_id, 0 where no
annotation covers it: nightrome/cocostuffapi@675ff387d8297af0d95acd56ece4a36d9945893a,
PythonAPI/pycocotools/cocostuffhelper.py), an ADE20K export already shifted to 0-based (mmseg's
reduce_zero_label applied: 255 "other"), Cityscapes trainIds under the labelIds name."""

import numpy as np
import pytest
from PIL import Image

import framework  # noqa: F401  (fills the registries)
from framework.data.published.cityscapes import LABEL_ID_TO_TRAIN_ID
from framework.data.published.fixture_trees import write_fixture_tree
from framework.errors import DataError
from framework.registry import DATASETS
from support import REPO, call_tool


def build(kind, root, **extra):
    return DATASETS.build({"type": kind, "root": str(root), **extra})


def rewrite_maps(paths, convert):
    for path in paths:
        Image.fromarray(convert(np.asarray(Image.open(path))).astype(np.uint8)).save(path)


def one_based(stored):
    """stuffthingmaps' ids one higher, 255 (unlabeled) -> 0."""
    return np.where(stored == 255, 0, stored.astype(np.int64) + 1)


@pytest.fixture
def coco(tmp_path):
    """A COCO-Stuff tree whose maps hold no 181, so that their 1-based rewriting holds no 182."""
    root = write_fixture_tree("cocostuff", tmp_path / "coco", samples=2)
    rewrite_maps(sorted((root / "annotations").rglob("*.png")), lambda ids: np.where(ids == 181, 180, ids))
    return root


def test_one_based_cocostuff_maps_are_refused_naming_a_file_and_read_with_label_files_cocostuffapi(coco):
    expected = {}
    for labels in ("segmentation", "synthesis"):
        published = build("COCOStuff", coco, labels=labels)
        expected[labels] = [published.read_mask(i) for i in range(len(published))]
    paths = [published.mask_path(i) for i in range(len(published))]
    rewrite_maps(paths, one_based)
    assert not any({0, 182} - set(np.unique(np.asarray(Image.open(path)))) != {182} for path in paths)
    with pytest.raises(DataError, match=r"annotations/train2017/\d{12}\.png: .*1-based.*label_files: cocostuffapi.*"
                                         r"encoding_check: false"):
        build("COCOStuff", coco)
    vouched = build("COCOStuff", coco, encoding_check=False)  # the user's word: read as stuffthingmaps, no look
    assert len(vouched) == len(paths)
    for labels in ("segmentation", "synthesis"):
        read = build("COCOStuff", coco, label_files="cocostuffapi", labels=labels)
        for index in range(len(read)):
            np.testing.assert_array_equal(read.read_mask(index), expected[labels][index])


def test_published_stuffthingmaps_read_as_cocostuffapi_are_refused(coco):
    with pytest.raises(DataError, match=r"\.png: holds 255.*stuffthingmaps.*label_files: stuffthingmaps"):
        build("COCOStuff", coco, label_files="cocostuffapi")


def test_check_dataset_refuses_one_based_cocostuff_maps_in_one_line(coco, tmp_path):
    rewrite_maps(sorted((coco / "annotations").rglob("*.png")), one_based)
    config = tmp_path / "coco.yaml"
    config.write_text((REPO / "configs/segmentation/deeplabv3plus_r50_ade20k.yaml").read_text()
                      .replace("../_base_/", f"{REPO}/configs/_base_/"))
    dataset = f"{{type: COCOStuff, root: {coco}, split: train}}"
    done = call_tool("check_dataset", "--config", config, f"data.train.dataset={dataset}", "task.num_classes=171")
    assert done.returncode != 0 and "no problems found" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "1-based" in lines[0] and "Traceback" not in done.stderr


def test_a_zero_based_ade20k_export_is_refused_naming_a_file(tmp_path):
    root = write_fixture_tree("ade20k", tmp_path / "ade", samples=2)
    build("ADE20K", root)
    paths = sorted((root / "annotations/training").glob("*.png"))
    rewrite_maps(paths, lambda stored: np.where(stored == 0, 255, stored.astype(np.int64) - 1))
    with pytest.raises(DataError, match=r"ADE_train_\d{8}\.png: holds 255.*0-based export"):
        build("ADE20K", root)


def test_cityscapes_train_ids_without_255_under_the_label_ids_name_are_refused(tmp_path):
    root = write_fixture_tree("cityscapes", tmp_path / "cityscapes", samples=2)
    build("Cityscapes", root)
    paths = sorted((root / "gtFine/train").rglob("*_gtFine_labelIds.png"))
    # every pixel a training class: no 255 gives the maps away one by one, only their values together
    rewrite_maps(paths, lambda label_ids: np.where(LABEL_ID_TO_TRAIN_ID[label_ids] == 255, 0,
                                                   LABEL_ID_TO_TRAIN_ID[label_ids]))
    with pytest.raises(DataError, match=r"_gtFine_labelIds\.png: none of the 2 .*above 18.*label_files: labelTrainIds"):
        build("Cityscapes", root)


def test_the_encoding_rules_at_their_boundaries(coco, tmp_path):
    paths = sorted((coco / "annotations/train2017").glob("*.png"))
    # 1-based without an unlabeled pixel: 182 (wood) alone gives it away
    rewrite_maps(paths, lambda ids: np.where(ids == 255, 182, ids.astype(np.int64) + 1))
    with pytest.raises(DataError, match=r"\.png: none of the 2 .*holds 0 or 182/183"):
        build("COCOStuff", coco)
    # one 255 in one map of the split: the published encoding
    rewrite_maps(paths, lambda ids: np.where(ids == 182, 181, ids))
    first = np.asarray(Image.open(paths[0])).copy()
    first[0, 0] = 255
    Image.fromarray(first).save(paths[0])
    build("COCOStuff", coco)
    # Cityscapes: one labelId of 19 (traffic light) in one map reads as labelIds
    root = write_fixture_tree("cityscapes", tmp_path / "cityscapes", samples=2)
    maps = sorted((root / "gtFine/train").rglob("*_gtFine_labelIds.png"))
    rewrite_maps(maps, lambda ids: np.minimum(ids, 18))
    with pytest.raises(DataError, match="above 18"):
        build("Cityscapes", root)
    last = np.asarray(Image.open(maps[-1])).copy()
    last[5, 5] = 19
    Image.fromarray(last).save(maps[-1])
    build("Cityscapes", root)

"""The published datasets' label tables, entry by entry, against tables written here from the
published lists (cityscapesScripts' helpers/labels.py, COCO-Stuff's unused thing ids, ADE20K's
objectInfo150 with 0 = other), on fixture trees in each layout; and the class names and palettes."""

import numpy as np
import pytest
from PIL import Image

import framework  # noqa: F401  (fills the registries)
from framework.data.published.ade20k import ADE20K_CLASSES, ADE20K_PALETTE
from framework.data.published.cityscapes import LABEL_ID_CLASSES, LABEL_ID_PALETTE, TRAIN_CLASSES, TRAIN_PALETTE
from framework.data.published.cocostuff import COCO_STUFF_182_CLASSES, COCO_STUFF_CLASSES, COCO_STUFF_PALETTE
from framework.data.published.fixture_trees import write_fixture_tree
from framework.registry import DATASETS

# labels.py: labelId -> trainId for the 19 training classes; every other labelId is ignored
CITYSCAPES_TRAIN_ID = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11, 25: 12,
                       26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
CITYSCAPES_19 = [("road", (128, 64, 128)), ("sidewalk", (244, 35, 232)), ("building", (70, 70, 70)),
                 ("wall", (102, 102, 156)), ("fence", (190, 153, 153)), ("pole", (153, 153, 153)),
                 ("traffic light", (250, 170, 30)), ("traffic sign", (220, 220, 0)), ("vegetation", (107, 142, 35)),
                 ("terrain", (152, 251, 152)), ("sky", (70, 130, 180)), ("person", (220, 20, 60)),
                 ("rider", (255, 0, 0)), ("car", (0, 0, 142)), ("truck", (0, 0, 70)), ("bus", (0, 60, 100)),
                 ("train", (0, 80, 100)), ("motorcycle", (0, 0, 230)), ("bicycle", (119, 11, 32))]
COCO_UNUSED = {11: "street sign", 25: "hat", 28: "shoe", 29: "eye glasses", 44: "plate", 65: "mirror",
               67: "window", 68: "desk", 70: "door", 82: "blender", 90: "hair brush"}


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    out = tmp_path_factory.mktemp("published")
    return {layout: write_fixture_tree(layout, out / layout, samples=3, train_ids=True)
            for layout in ("cityscapes", "ade20k", "cocostuff")}


def stored(path) -> np.ndarray:
    return np.asarray(Image.open(path))


def expected_cityscapes(label_ids: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda v: CITYSCAPES_TRAIN_ID.get(int(v), 255))(label_ids)


def expected_cocostuff(ids: np.ndarray) -> np.ndarray:
    def train_id(v):
        if v == 255 or v in COCO_UNUSED:
            return 255
        return v - sum(1 for unused in COCO_UNUSED if unused < v)
    return np.vectorize(train_id)(ids)


def masks_and_stored(dataset):
    """(mask as a sample gives it, the label file's stored values) of every sample."""
    for index in range(len(dataset)):
        yield dataset[index]["mask"].numpy(), stored(dataset.mask_path(index))


def test_cityscapes_every_label_id_becomes_its_train_id(trees):
    seen = set()
    for split in ("train", "val"):
        dataset = DATASETS.build({"type": "Cityscapes", "root": str(trees["cityscapes"]), "split": split})
        assert all(str(p).endswith("_gtFine_labelIds.png") for p in dataset.mask_files)
        for mask, label_ids in masks_and_stored(dataset):
            np.testing.assert_array_equal(mask, expected_cityscapes(label_ids))
            seen |= set(np.unique(label_ids).tolist())
    assert seen == set(range(34))  # every entry of the table was read


def test_cityscapes_label_train_ids_files_give_the_same_masks(trees):
    label_ids = DATASETS.build({"type": "Cityscapes", "root": str(trees["cityscapes"])})
    train_ids = DATASETS.build({"type": "Cityscapes", "root": str(trees["cityscapes"]), "label_files": "labelTrainIds"})
    assert all(str(p).endswith("_gtFine_labelTrainIds.png") for p in train_ids.mask_files)
    for index in range(len(label_ids)):
        np.testing.assert_array_equal(label_ids[index]["mask"].numpy(), train_ids[index]["mask"].numpy())


def test_cityscapes_synthesis_reads_the_35_label_ids_as_they_are(trees):
    dataset = DATASETS.build({"type": "Cityscapes", "root": str(trees["cityscapes"]), "labels": "synthesis"})
    assert dataset.num_classes == 35 and dataset.class_names[7] == "road" and dataset.class_names[34] == "license plate"
    for mask, label_ids in masks_and_stored(dataset):
        np.testing.assert_array_equal(mask, label_ids)


def test_ade20k_zero_is_ignored_and_every_class_moves_down_one(trees):
    seen = set()
    for split in ("training", "val"):
        dataset = DATASETS.build({"type": "ADE20K", "root": str(trees["ade20k"]), "split": split})
        assert dataset.num_classes == 150 and dataset.ignore_index == 255
        for mask, values in masks_and_stored(dataset):
            np.testing.assert_array_equal(mask, np.where(values == 0, 255, values.astype(np.int64) - 1))
            seen |= set(np.unique(values).tolist())
    assert seen == set(range(151))


def test_ade20k_synthesis_keeps_zero_as_its_own_dont_care_label(trees):
    dataset = DATASETS.build({"type": "ADE20K", "root": str(trees["ade20k"]), "labels": "synthesis"})
    assert dataset.num_classes == 151 and dataset.class_names[0] == "other" and dataset.class_names[1] == "wall"
    zeros = 0
    for mask, values in masks_and_stored(dataset):
        np.testing.assert_array_equal(mask, values)
        zeros += int((mask == 0).sum())
    assert zeros > 0


def test_cocostuff_every_id_drops_the_unused_things_and_maps_in_order(trees):
    seen = set()
    for split in ("train", "val2017"):
        dataset = DATASETS.build({"type": "COCOStuff", "root": str(trees["cocostuff"]), "split": split})
        assert dataset.num_classes == 171
        assert not any(str(p).endswith("_labelTrainIds.png") for p in dataset.mask_files)  # converted files skipped
        for mask, ids in masks_and_stored(dataset):
            np.testing.assert_array_equal(mask, expected_cocostuff(ids))
            seen |= set(np.unique(ids).tolist())
    assert seen == {*range(182), 255}


def test_cocostuff_label_train_ids_files_give_the_same_masks(trees):
    published = DATASETS.build({"type": "COCOStuff", "root": str(trees["cocostuff"])})
    converted = DATASETS.build({"type": "COCOStuff", "root": str(trees["cocostuff"]), "label_files": "labelTrainIds"})
    assert list(converted.names) == list(published.names)
    for index in range(len(converted)):
        np.testing.assert_array_equal(converted[index]["mask"].numpy(), published[index]["mask"].numpy())


def test_cocostuff_synthesis_reads_the_182_ids_with_255_dont_care(trees):
    dataset = DATASETS.build({"type": "COCOStuff", "root": str(trees["cocostuff"]), "labels": "synthesis"})
    assert dataset.num_classes == 182 and dataset.ignore_index == 255
    for mask, ids in masks_and_stored(dataset):
        np.testing.assert_array_equal(mask, ids)


def test_each_dataset_carries_its_names_and_palette(trees):
    segmentation = DATASETS.build({"type": "Cityscapes", "root": str(trees["cityscapes"])})
    synthesis = DATASETS.build({"type": "Cityscapes", "root": str(trees["cityscapes"]), "labels": "synthesis"})
    assert list(zip(segmentation.class_names, segmentation.palette)) == CITYSCAPES_19
    assert (synthesis.class_names[26], synthesis.palette[26], synthesis.palette[5]) == ("car", (0, 0, 142), (111, 74, 0))
    ade = DATASETS.build({"type": "ADE20K", "root": str(trees["ade20k"]), "labels": "synthesis"})
    assert (ade.palette[0], ade.palette[1], ade.class_names[150]) == ((0, 0, 0), (120, 120, 120), "flag")
    coco = DATASETS.build({"type": "COCOStuff", "root": str(trees["cocostuff"])})
    assert (coco.palette[0], coco.palette[170], coco.class_names[11]) == ((0, 192, 64), (64, 64, 0), "stop sign")
    for dataset in (segmentation, synthesis, ade, coco):
        assert dataset.ignore_index == 255


def test_cityscapes_names_and_palette_are_the_published_ones():
    assert list(zip(TRAIN_CLASSES, TRAIN_PALETTE)) == CITYSCAPES_19
    assert len(LABEL_ID_CLASSES) == len(LABEL_ID_PALETTE) == 35
    for label_id, train_id in CITYSCAPES_TRAIN_ID.items():
        assert (LABEL_ID_CLASSES[label_id], LABEL_ID_PALETTE[label_id]) == CITYSCAPES_19[train_id]
    assert LABEL_ID_CLASSES[:4] == ("unlabeled", "ego vehicle", "rectification border", "out of roi")
    assert (LABEL_ID_CLASSES[9], LABEL_ID_PALETTE[9]) == ("parking", (250, 170, 160))


def test_ade20k_names_and_palette_are_the_benchmarks():
    assert len(ADE20K_CLASSES) == len(set(ADE20K_CLASSES)) == len(ADE20K_PALETTE) == 150
    # objectInfo150.csv's first and last rows, and a few between; the benchmark's colours of them
    assert ADE20K_CLASSES[:5] == ("wall", "building", "sky", "floor", "tree")
    assert (ADE20K_CLASSES[12], ADE20K_CLASSES[20], ADE20K_CLASSES[149]) == ("person", "car", "flag")
    assert (ADE20K_PALETTE[0], ADE20K_PALETTE[2], ADE20K_PALETTE[149]) == ((120, 120, 120), (6, 230, 230), (92, 0, 255))


def test_cocostuff_names_and_palette_are_the_published_ones():
    assert len(COCO_STUFF_182_CLASSES) == 182 and len(COCO_STUFF_CLASSES) == len(COCO_STUFF_PALETTE) == 171
    assert {i: COCO_STUFF_182_CLASSES[i] for i in COCO_UNUSED} == COCO_UNUSED
    # COCO ids 1 (person), 80 things later 90 (toothbrush), stuff ids 92 (banner) .. 182 (wood)
    assert (COCO_STUFF_182_CLASSES[0], COCO_STUFF_182_CLASSES[89], COCO_STUFF_182_CLASSES[91]) == (
        "person", "toothbrush", "banner")
    assert COCO_STUFF_182_CLASSES[181] == "wood" and COCO_STUFF_CLASSES[80] == "banner"
    assert COCO_STUFF_CLASSES == tuple(n for i, n in enumerate(COCO_STUFF_182_CLASSES) if i not in COCO_UNUSED)
    assert (COCO_STUFF_PALETTE[0], COCO_STUFF_PALETTE[170]) == ((0, 192, 64), (64, 64, 0))

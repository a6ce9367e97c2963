"""How a published reader reads a label file: uint8 maps out, the sample's name, 16-bit and
two-channel files, unreadable ones, and the lists in its messages (the first few names, the first
ten values); written against the mutation survivors of framework/data/published/common.py."""

import re
import shutil

import numpy as np
import pytest
from PIL import Image

import framework  # noqa: F401  (fills the registries)
from framework.data.published.fixture_trees import write_fixture_tree
from framework.errors import ConfigError, DataError
from framework.registry import DATASETS


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return write_fixture_tree("ade20k", tmp_path_factory.mktemp("ade20k"), samples=3)


@pytest.fixture
def ade(pristine, tmp_path):
    root = shutil.copytree(pristine, tmp_path / "ADEChallengeData2016")
    return DATASETS.build({"type": "ADE20K", "root": str(root)})


def test_maps_come_out_as_uint8_with_the_samples_name(ade):
    assert ade.read_mask(0).dtype == np.uint8  # the table's type: a 1024x2048 map is 2 MB, not 16
    synthesis = DATASETS.build({"type": "ADE20K", "root": str(ade.mask_dir).split("/annotations")[0],
                                "labels": "synthesis"})
    assert synthesis.read_mask(0).dtype == np.uint8  # a table made when the dataset is built
    sample = ade[2]
    assert sample["name"] == "ADE_train_00000003" == str(ade.names[2])


def test_a_16_bit_map_with_a_value_past_255_is_named(ade):
    path = ade.mask_path(1)
    labels = np.asarray(Image.open(path)).astype(np.uint16)
    labels[0, 0] = 256
    Image.fromarray(labels).save(path)
    assert Image.open(path).mode == "I;16"
    with pytest.raises(DataError, match=rf"^{path}: label value\(s\) \[256\] outside ADE20K's 0\.\.150 \(0 = other\)$"):
        ade[1]


def test_a_message_lists_the_first_ten_bad_values(ade):
    path = ade.mask_path(0)
    Image.fromarray(np.arange(160, 192, dtype=np.uint8).reshape(4, 8).repeat(8, 0).repeat(6, 1)).save(path)
    with pytest.raises(DataError, match=re.escape(f"{path}: label value(s) {list(range(160, 170))} outside")):
        ade[0]


def test_two_channel_rgba_and_unreadable_label_files_are_named(ade):
    grey_alpha, rgba, broken = ade.mask_path(0), ade.mask_path(1), ade.mask_path(2)
    Image.fromarray(np.zeros((32, 48, 2), np.uint8), mode="LA").save(grey_alpha)
    with pytest.raises(DataError, match=rf"^{grey_alpha}: 2 channels, not an index map; expected annotations/<split>/"
                                        r"<stem>\.png, a single-channel map of 0\.\.150$"):
        ade[0]
    Image.fromarray(np.zeros((32, 48, 4), np.uint8), mode="RGBA").save(rgba)
    with pytest.raises(DataError, match=rf"^{rgba}: an RGB colour image, not an index map; expected annotations/.*"
                                        r"\(a colour visualisation is not read as labels: its colours are not class "
                                        r"ids\)$"):
        ade[1]
    with open(broken, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n truncated")
    with pytest.raises(DataError, match=rf"^{broken}: cannot read label file \("):
        ade[2]


def test_unpaired_messages_name_five_stems_then_an_ellipsis(pristine, tmp_path):
    root = shutil.copytree(pristine, tmp_path / "ADEChallengeData2016")
    for k in range(4, 11):  # seven images without annotations
        shutil.copy(root / "images/training/ADE_train_00000001.jpg", root / f"images/training/ADE_train_{k:08d}.jpg")
    shown = ", ".join(f"ADE_train_{k:08d}" for k in range(4, 9))
    with pytest.raises(DataError, match=re.escape(f"unpaired files: 7 of 10 image(s) in {root}/images/training have "
                                                  f"no <stem>.png in {root}/annotations/training: {shown}, ...") + "$"):
        DATASETS.build({"type": "ADE20K", "root": str(root)})
    for k in range(9, 11):  # five: all shown, no ellipsis
        (root / f"images/training/ADE_train_{k:08d}.jpg").unlink()
    with pytest.raises(DataError, match=re.escape(f": {shown}") + "$"):
        DATASETS.build({"type": "ADE20K", "root": str(root)})


def test_the_empty_split_and_a_wrong_labels_option_are_named(pristine, tmp_path):
    root = shutil.copytree(pristine, tmp_path / "ADEChallengeData2016")
    with pytest.raises(ConfigError, match=r"labels must be one of segmentation, synthesis, got 'synth'$"):
        DATASETS.build({"type": "ADE20K", "root": str(root), "labels": "synth"})
    for path in (root / "images/training").iterdir():
        path.unlink()
    with pytest.raises(DataError, match=re.escape(f"{root}/images/training: no images (*.jpg): an empty split; is root "
                                                  "the folder the dataset was unpacked to?") + "$"):
        DATASETS.build({"type": "ADE20K", "root": str(root)})

"""ADE20K as the scene-parsing benchmark publishes it (ADEChallengeData2016.zip, MIT Scene Parsing):

    root = ADEChallengeData2016/
    root/images/<training|validation>/ADE_<train|val>_%08d.jpg
    root/annotations/<training|validation>/<same stem>.png     (values 0..150; 0 = "other")

Segmentation: 0 becomes 255 (ignored) and class c becomes c - 1 (150 classes; mmseg's
`reduce_zero_label`). Synthesis: the values as they are, 151 labels of which 0 ("other") is the
don't-care label OASIS keeps as its own channel (SPADE's 150 + don't-care channel is the
segmentation labels with the generator's `contain_dontcare_label: true`).

The full ADE20K release (ADE20K_2016_07_26 / ADE20K_2021_17_01: `*_seg.png` files whose R and G
channels encode one of 3000+ classes) is another dataset; it is refused in one line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from framework.data.published.common import (
    IGNORE,
    PublishedDataset,
    allowed,
    check_labels_option,
    files_with_suffix,
    identity_table,
    lookup_table,
    pair_or_refuse,
    require_folder,
    split_folder,
)
from framework.errors import DataError
from framework.registry import DATASETS

# objectInfo150's names in class order (class c is stored as c + 1), and the benchmark's palette
ADE20K_CLASSES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass", "cabinet",
    "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair", "car", "water",
    "painting", "sofa", "shelf", "house", "sea", "mirror", "rug", "field", "armchair", "seat", "fence",
    "desk", "rock", "wardrobe", "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand",
    "path", "stairs", "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge",
    "bookcase", "blind", "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove",
    "palm", "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus",
    "towel", "light", "truck", "tower", "chandelier", "awning", "streetlight", "booth", "television receiver",
    "airplane", "dirt track", "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle",
    "buffet", "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything",
    "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag", "minibike", "cradle", "oven",
    "ball", "food", "step", "tank", "trade name", "microwave", "pot", "animal", "bicycle", "lake",
    "dishwasher", "screen", "blanket", "sculpture", "hood", "sconce", "vase", "traffic light", "tray",
    "ashcan", "fan", "pier", "crt screen", "plate", "monitor", "bulletin board", "shower", "radiator",
    "glass", "clock", "flag",
)  # fmt: skip
ADE20K_PALETTE = (
    (120, 120, 120), (180, 120, 120), (6, 230, 230), (80, 50, 50), (4, 200, 3), (120, 120, 80), (140, 140, 140),
    (204, 5, 255), (230, 230, 230), (4, 250, 7), (224, 5, 255), (235, 255, 7), (150, 5, 61), (120, 120, 70), (8,
    255, 51), (255, 6, 82), (143, 255, 140), (204, 255, 4), (255, 51, 7), (204, 70, 3), (0, 102, 200), (61, 230,
    250), (255, 6, 51), (11, 102, 255), (255, 7, 71), (255, 9, 224), (9, 7, 230), (220, 220, 220), (255, 9, 92),
    (112, 9, 255), (8, 255, 214), (7, 255, 224), (255, 184, 6), (10, 255, 71), (255, 41, 10), (7, 255, 255), (224,
    255, 8), (102, 8, 255), (255, 61, 6), (255, 194, 7), (255, 122, 8), (0, 255, 20), (255, 8, 41), (255, 5, 153),
    (6, 51, 255), (235, 12, 255), (160, 150, 20), (0, 163, 255), (140, 140, 140), (250, 10, 15), (20, 255, 0),
    (31, 255, 0), (255, 31, 0), (255, 224, 0), (153, 255, 0), (0, 0, 255), (255, 71, 0), (0, 235, 255), (0, 173,
    255), (31, 0, 255), (11, 200, 200), (255, 82, 0), (0, 255, 245), (0, 61, 255), (0, 255, 112), (0, 255, 133),
    (255, 0, 0), (255, 163, 0), (255, 102, 0), (194, 255, 0), (0, 143, 255), (51, 255, 0), (0, 82, 255), (0, 255,
    41), (0, 255, 173), (10, 0, 255), (173, 255, 0), (0, 255, 153), (255, 92, 0), (255, 0, 255), (255, 0, 245),
    (255, 0, 102), (255, 173, 0), (255, 0, 20), (255, 184, 184), (0, 31, 255), (0, 255, 61), (0, 71, 255), (255,
    0, 204), (0, 255, 194), (0, 255, 82), (0, 10, 255), (0, 112, 255), (51, 0, 255), (0, 194, 255), (0, 122, 255),
    (0, 255, 163), (255, 153, 0), (0, 255, 10), (255, 112, 0), (143, 255, 0), (82, 0, 255), (163, 255, 0), (255,
    235, 0), (8, 184, 170), (133, 0, 255), (0, 255, 92), (184, 0, 255), (255, 0, 31), (0, 184, 255), (0, 214,
    255), (255, 0, 112), (92, 255, 0), (0, 224, 255), (112, 224, 255), (70, 184, 160), (163, 0, 255), (153, 0,
    255), (71, 255, 0), (255, 0, 163), (255, 204, 0), (255, 0, 143), (0, 255, 235), (133, 255, 0), (255, 0, 235),
    (245, 0, 255), (255, 0, 122), (255, 245, 0), (10, 190, 212), (214, 255, 0), (0, 204, 255), (20, 0, 255), (255,
    255, 0), (0, 153, 255), (0, 41, 255), (0, 255, 204), (41, 0, 255), (41, 255, 0), (173, 0, 255), (0, 245, 255),
    (71, 0, 255), (122, 0, 255), (0, 255, 184), (0, 92, 255), (184, 255, 0), (0, 133, 255), (255, 214, 0), (25,
    194, 194), (102, 255, 0), (92, 0, 255),
)  # fmt: skip
SYNTHESIS_CLASSES = ("other", *ADE20K_CLASSES)
SYNTHESIS_PALETTE = ((0, 0, 0), *ADE20K_PALETTE)
STORED_VALUES = range(len(ADE20K_CLASSES) + 1)
SEGMENTATION_TABLE = lookup_table((value, value - 1) for value in STORED_VALUES if value > 0)  # 0 stays 255
SPLITS = {"training": "training", "train": "training", "validation": "validation", "val": "validation"}
FULL_RELEASE_MARKERS = ("index_ade20k.pkl", "index_ade20k.mat", "objects.txt")
SEARCHED_FOR_SEG_FILES = 2000  # directory entries looked at before deciding a tree is not the full release


@DATASETS.register()
class ADE20K(PublishedDataset):
    """root: ADEChallengeData2016/; split: training or validation (train and val accepted).
    labels: segmentation (150 classes, "other" ignored) or synthesis (151 labels, 0 = other)."""

    published_counts = {"training": 20210, "validation": 2000}
    stored_values = "ADE20K's 0..150 (0 = other)"
    label_pattern = "annotations/<split>/<stem>.png, a single-channel map of 0..150"

    def __init__(self, root: str, split: str = "training", labels: str = "segmentation", pipeline: Sequence = (),
                 encoding_check: bool = True):
        check_labels_option(labels)
        synthesis = labels == "synthesis"
        super().__init__(pipeline=pipeline, classes=SYNTHESIS_CLASSES if synthesis else ADE20K_CLASSES,
                         palette=SYNTHESIS_PALETTE if synthesis else ADE20K_PALETTE)
        self.split = split_folder(split, SPLITS, "ADE20K")
        root = require_folder(os.path.expanduser(str(root)), "ADE20K root, ADEChallengeData2016/")
        refuse_full_release(root)
        image_dir = require_folder(os.path.join(root, "images", self.split), "images/<split> of ADEChallengeData2016")
        label_dir = require_folder(os.path.join(root, "annotations", self.split),
                                   "annotations/<split> of ADEChallengeData2016")
        images = files_with_suffix(image_dir, ".jpg")
        annotations = files_with_suffix(label_dir, ".png")
        stems = pair_or_refuse(images, annotations, image_dir, label_dir, "*.jpg", "<stem>.png")
        self._set_paths(stems, image_dir, [images[s] for s in stems], label_dir, [annotations[s] for s in stems])
        self.table = identity_table(STORED_VALUES) if synthesis else SEGMENTATION_TABLE
        self.allowed_values = allowed(STORED_VALUES)
        if encoding_check:  # False: the user vouches for label_files (the look at a few maps skipped)
            self.probe_encoding()

    def encoding_mismatch(self, values_by_file: dict) -> str | None:
        """An export already shifted to 0-based (mmseg's reduce_zero_label applied: classes 0..149, "other"
        255) reads every class one too low and wall as ignored; its 255 gives it away."""
        shifted = next((path for path, values in values_by_file.items() if IGNORE in values), None)
        if shifted is None:
            return None
        return (f"{shifted}: holds 255, not an ADE20K value (0..150, 0 = other): a 0-based export (classes 0..149, "
                "255 other), which read as the benchmark's maps would put every class one too low; use the "
                "annotations of ADEChallengeData2016.zip, or add 1 to each value (255 becoming 0)")


def refuse_full_release(root: str) -> None:
    """A DataError when `root` holds the full ADE20K release rather than the benchmark: its index
    files, or `*_seg.png` files within the first few thousand entries of its tree."""
    marker = next((m for m in FULL_RELEASE_MARKERS if os.path.isfile(os.path.join(root, m))), None)
    seg_file = None if marker else first_seg_file(root)
    if marker or seg_file:
        found = os.path.join(root, marker) if marker else seg_file
        raise DataError(f"{root}: the full ADE20K release ({found}; *_seg.png files encode 3000+ classes in R and "
                        "G), a different dataset: download ADEChallengeData2016.zip (the 150-class scene-parsing "
                        "benchmark) and point root at its folder")


def first_seg_file(root: str) -> str | None:
    looked = 0
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        for name in files:
            if name.endswith("_seg.png"):
                return os.path.join(folder, name)
        looked += len(files) + len(subfolders)
        if looked > SEARCHED_FOR_SEG_FILES:
            return None
    return None

"""COCO-Stuff (the 164k version) as downloaded: COCO 2017's images and stuffthingmaps_trainval2017.zip:

    root/images/<train2017|val2017>/<12-digit id>.jpg
    root/annotations/<train2017|val2017>/<same id>.png    (COCO id - 1: 0..181; 255 unlabeled)
                                  .../<same id>_labelTrainIds.png   (mmseg's converter: 0..170, 255)
                                  .../<same id>.png    (label_files: cocostuffapi: COCO ids 1..182,
                                                        0 unlabeled, 183 other: cocostuffapi's
                                                        cocoSegmentationToPng writes category_id)

Of the 182 ids, 11 thing ids were never annotated (0-based 11, 25, 28, 29, 44, 65, 67, 68, 70,
82, 90: street sign, hat, shoe, eye glasses, plate, mirror, window, desk, door, blender, hair
brush); segmentation drops them and maps the other 171 in order to 0..170 (255 stays ignored).
Synthesis reads the 182 ids as they are with 255 as the don't-care label (SPADE's label_nc 182 +
contain_dontcare_label: 183 channels).

The two encodings share 0..181, so one map rarely tells them apart and 1-based maps read as
stuffthingmaps put every class one too high and unlabeled pixels in `person`. Start-up reads a few
maps (common.ENCODING_PROBE_FILES): as stuffthingmaps it refuses maps none of which holds 255 (the
official maps mark unannotated pixels 255) while one holds 0 (1-based: unlabeled) or 182/183
(ids only a 1-based map has); as cocostuffapi it refuses a 255 (a stuffthingmaps value).
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
from framework.registry import DATASETS

# COCO's 91 thing ids and 91 stuff ids, 0-based (the stored value is the COCO id - 1)
COCO_STUFF_182_CLASSES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "street sign", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse",
    "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "hat", "backpack", "umbrella", "shoe",
    "eye glasses", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle", "plate",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed",
    "mirror", "dining table", "window", "desk", "toilet", "door", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "blender", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush", "hair brush", "banner", "blanket",
    "branch", "bridge", "building-other", "bush", "cabinet", "cage", "cardboard", "carpet", "ceiling-other",
    "ceiling-tile", "cloth", "clothes", "clouds", "counter", "cupboard", "curtain", "desk-stuff", "dirt",
    "door-stuff", "fence", "floor-marble", "floor-other", "floor-stone", "floor-tile", "floor-wood", "flower",
    "fog", "food-other", "fruit", "furniture-other", "grass", "gravel", "ground-other", "hill", "house",
    "leaves", "light", "mat", "metal", "mirror-stuff", "moss", "mountain", "mud", "napkin", "net", "paper",
    "pavement", "pillow", "plant-other", "plastic", "platform", "playingfield", "railing", "railroad",
    "river", "road", "rock", "roof", "rug", "salad", "sand", "sea", "shelf", "sky-other", "skyscraper",
    "snow", "solid-other", "stairs", "stone", "straw", "structural-other", "table", "tent", "textile-other",
    "towel", "tree", "vegetable", "wall-brick", "wall-concrete", "wall-other", "wall-panel", "wall-stone",
    "wall-tile", "wall-wood", "water-other", "waterdrops", "window-blind", "window-other", "wood",
)  # fmt: skip
UNUSED_THING_IDS = (11, 25, 28, 29, 44, 65, 67, 68, 70, 82, 90)
USED_IDS = tuple(i for i in range(len(COCO_STUFF_182_CLASSES)) if i not in UNUSED_THING_IDS)
COCO_STUFF_CLASSES = tuple(COCO_STUFF_182_CLASSES[i] for i in USED_IDS)  # the 171 segmentation classes
# the palette of mmseg's COCOStuffDataset, one colour per segmentation class
COCO_STUFF_PALETTE = (
    (0, 192, 64), (0, 192, 64), (0, 64, 96), (128, 192, 192), (0, 64, 64), (0, 192, 224), (0, 192, 192), (128,
    192, 64), (0, 192, 96), (128, 192, 64), (128, 32, 192), (0, 0, 224), (0, 0, 64), (0, 160, 192), (128, 0, 96),
    (128, 0, 192), (0, 32, 192), (128, 128, 224), (0, 0, 192), (128, 160, 192), (128, 128, 0), (128, 0, 32), (128,
    32, 0), (128, 0, 128), (64, 128, 32), (0, 160, 0), (0, 0, 0), (192, 128, 160), (0, 32, 0), (0, 128, 128), (64,
    128, 160), (128, 160, 0), (0, 128, 0), (192, 128, 32), (128, 96, 128), (0, 0, 128), (64, 0, 32), (0, 224,
    128), (128, 0, 0), (192, 0, 160), (0, 96, 128), (128, 128, 128), (64, 0, 160), (128, 224, 128), (128, 128,
    64), (192, 0, 32), (128, 96, 0), (128, 0, 192), (0, 128, 32), (64, 224, 0), (0, 0, 64), (128, 128, 160), (64,
    96, 0), (0, 128, 192), (0, 128, 160), (192, 224, 0), (0, 128, 64), (128, 128, 32), (192, 32, 128), (0, 64,
    192), (0, 0, 32), (64, 160, 128), (128, 64, 64), (128, 0, 160), (64, 32, 128), (128, 192, 192), (0, 0, 160),
    (192, 160, 128), (128, 192, 0), (128, 0, 96), (192, 32, 0), (128, 64, 128), (64, 128, 96), (64, 160, 0), (0,
    64, 0), (192, 128, 224), (64, 32, 0), (0, 192, 128), (64, 128, 224), (192, 160, 0), (0, 192, 0), (192, 128,
    96), (192, 96, 128), (0, 64, 128), (64, 0, 96), (64, 224, 128), (128, 64, 0), (192, 0, 224), (64, 96, 128),
    (128, 192, 128), (64, 0, 224), (192, 224, 128), (128, 192, 64), (192, 0, 96), (192, 96, 0), (128, 64, 192),
    (0, 128, 96), (0, 224, 0), (64, 64, 64), (128, 128, 224), (0, 96, 0), (64, 192, 192), (0, 128, 224), (128,
    224, 0), (64, 192, 64), (128, 128, 96), (128, 32, 128), (64, 0, 192), (0, 64, 96), (0, 160, 128), (192, 0,
    64), (128, 64, 224), (0, 32, 128), (192, 128, 192), (0, 64, 224), (128, 160, 128), (192, 128, 0), (128, 64,
    32), (128, 32, 64), (192, 0, 128), (64, 192, 32), (0, 160, 64), (64, 0, 0), (192, 192, 160), (0, 32, 64), (64,
    128, 128), (64, 192, 160), (128, 160, 64), (64, 128, 0), (192, 192, 32), (128, 96, 192), (64, 0, 128), (64,
    64, 32), (0, 224, 192), (192, 0, 0), (192, 64, 160), (0, 96, 192), (192, 128, 128), (64, 64, 160), (128, 224,
    192), (192, 128, 64), (192, 64, 32), (128, 96, 64), (192, 0, 192), (0, 192, 32), (64, 224, 64), (64, 0, 64),
    (128, 192, 160), (64, 96, 64), (64, 128, 192), (0, 192, 160), (192, 224, 64), (64, 128, 64), (128, 192, 32),
    (192, 32, 192), (64, 64, 192), (0, 64, 32), (64, 160, 192), (192, 64, 64), (128, 64, 160), (64, 32, 192),
    (192, 192, 192), (0, 64, 160), (192, 160, 192), (192, 192, 0), (128, 64, 96), (192, 32, 64), (192, 64, 128),
    (64, 192, 96), (64, 160, 64), (64, 64, 0),
)  # fmt: skip
COCO_STUFF_182_PALETTE = tuple(COCO_STUFF_PALETTE[USED_IDS.index(i)] if i in USED_IDS else (0, 0, 0)
                               for i in range(len(COCO_STUFF_182_CLASSES)))
ID_TO_TRAIN_ID = lookup_table((stored, train_id) for train_id, stored in enumerate(USED_IDS))
STORED_VALUES = (*range(len(COCO_STUFF_182_CLASSES)), IGNORE)
TRAIN_ID_VALUES = (*range(len(COCO_STUFF_CLASSES)), IGNORE)
# cocostuffapi's 1-based maps: id v is stuffthingmaps' v - 1; 0 (unlabeled) and 183 (other) are no class
ONE_BASED_VALUES = range(len(COCO_STUFF_182_CLASSES) + 2)
ONE_BASED_TO_ID = lookup_table((v, v - 1) for v in range(1, len(COCO_STUFF_182_CLASSES) + 1))
ONE_BASED_ONLY = (len(COCO_STUFF_182_CLASSES), len(COCO_STUFF_182_CLASSES) + 1)  # 182, 183
SPLITS = {"train": "train2017", "train2017": "train2017", "val": "val2017", "val2017": "val2017"}
LABEL_FILES = {"stuffthingmaps": ".png", "labelTrainIds": "_labelTrainIds.png", "cocostuffapi": ".png"}


@DATASETS.register()
class COCOStuff(PublishedDataset):
    """root: the folder holding images/ and annotations/; split: train or val (train2017, val2017).
    labels: segmentation (171 classes) or synthesis (the 182 ids, 255 don't-care).
    label_files: stuffthingmaps (as published: 0..181, 255 unlabeled), labelTrainIds (converted;
    segmentation only) or cocostuffapi (1-based ids 1..182, 0 unlabeled, as cocostuffapi writes them)."""

    published_counts = {"train2017": 118287, "val2017": 5000}

    def __init__(self, root: str, split: str = "train", labels: str = "segmentation",
                 label_files: str = "stuffthingmaps", pipeline: Sequence = (), encoding_check: bool = True):
        check_labels_option(labels)
        if label_files not in LABEL_FILES:
            raise ValueError(f"label_files must be one of {', '.join(LABEL_FILES)}, got {label_files!r}")
        synthesis = labels == "synthesis"
        if synthesis and label_files == "labelTrainIds":
            raise ValueError("label_files: labelTrainIds has lost the 182 ids that labels: synthesis reads; "
                             "use label_files: stuffthingmaps")
        super().__init__(pipeline=pipeline, classes=COCO_STUFF_182_CLASSES if synthesis else COCO_STUFF_CLASSES,
                         ignore_index=IGNORE, palette=COCO_STUFF_182_PALETTE if synthesis else COCO_STUFF_PALETTE)
        self.split = split_folder(split, SPLITS, "COCO-Stuff")
        root = require_folder(os.path.expanduser(str(root)), "COCO-Stuff root")
        image_dir = require_folder(os.path.join(root, "images", self.split), "images/<split>: COCO 2017's images")
        label_dir = require_folder(os.path.join(root, "annotations", self.split),
                                   "annotations/<split> of stuffthingmaps_trainval2017.zip")
        suffix = LABEL_FILES[label_files]
        # the converter writes its files beside the published ones: each kind skips the other
        skip = ("_labelTrainIds.png",) if suffix == ".png" else ()
        self.label_files = label_files
        self.label_pattern = f"annotations/<split>/<id>{suffix}, a single-channel map"
        images = files_with_suffix(image_dir, ".jpg")
        annotations = files_with_suffix(label_dir, suffix, skip=skip)
        stems = pair_or_refuse(images, annotations, image_dir, label_dir, "*.jpg", f"<id>{suffix}")
        self._set_paths(stems, image_dir, [images[s] for s in stems], label_dir, [annotations[s] for s in stems])
        if label_files == "labelTrainIds":
            self.table, self.allowed_values = identity_table(TRAIN_ID_VALUES), allowed(TRAIN_ID_VALUES)
            self.stored_values = "the train ids 0..170 and 255 of a labelTrainIds file"
        else:
            self.table = identity_table(STORED_VALUES) if synthesis else ID_TO_TRAIN_ID
            self.allowed_values = allowed(STORED_VALUES)
            self.stored_values = "COCO-Stuff's ids 0..181 and 255 (unlabeled)"
        if label_files == "cocostuffapi":  # the same maps one id higher: through the stuffthingmaps table
            self.table = self.table[ONE_BASED_TO_ID]
            self.allowed_values = allowed(ONE_BASED_VALUES)
            self.stored_values = "cocostuffapi's 1-based ids 0..183 (0 unlabeled)"
        if encoding_check:  # False: the user vouches for label_files (the look at a few maps skipped)
            self.probe_encoding()

    def encoding_mismatch(self, values_by_file: dict) -> str | None:
        with_255 = next((path for path, values in values_by_file.items() if IGNORE in values), None)
        if self.label_files == "cocostuffapi":
            if with_255 is None:
                return None
            return (f"{with_255}: holds 255, the unlabeled value of the published stuffthingmaps (0..181, 255), not "
                    "of cocostuffapi's 1-based maps (0 unlabeled, 1..182): read these files with label_files: "
                    "stuffthingmaps")
        if self.label_files != "stuffthingmaps" or with_255 is not None:
            return None
        one_based = next((path for path, values in values_by_file.items()
                          if 0 in values or any(v in values for v in ONE_BASED_ONLY)), None)
        if one_based is None:
            return None
        return (f"{one_based}: none of the {len(values_by_file)} COCO-Stuff label maps read holds 255 (unlabeled in "
                "the published stuffthingmaps) and this one holds 0 or 182/183: 1-based ids (0 unlabeled, 1..182, "
                "as cocostuffapi writes them), which read as stuffthingmaps would put every class one too high; "
                "read them with label_files: cocostuffapi")

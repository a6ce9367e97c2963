"""Cityscapes as downloaded (leftImg8bit_trainvaltest.zip + gtFine_trainvaltest.zip, unpacked
into one `root`):

    root/leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png
    root/gtFine/<split>/<city>/<city>_<seq>_<frame>_gtFine_labelIds.png      (labelIds 0..33)
                                              ..._gtFine_instanceIds.png   (16-bit; SPADE's edges)
                                              ..._gtFine_labelTrainIds.png (the official scripts' or
                                                                            mmseg's converter output)

An image pairs with the label file of the same three-field stem. Segmentation reads the 19
training classes (labelIds -> trainIds, every other id 255); synthesis reads the 35 labelIds as
they are (SPADE's and OASIS's label_nc 35). `*_gtFine_color.png` is a visualisation and is never
read as labels.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from framework.data.base import split_item
from framework.data.published.common import (
    IGNORE,
    PublishedDataset,
    allowed,
    check_labels_option,
    files_in_subfolders,
    identity_table,
    lookup_table,
    pair_or_refuse,
    read_label_file,
    require_folder,
    split_folder,
)
from framework.errors import DataError
from framework.registry import DATASETS

# (name, labelId, trainId, colour) of cityscapesScripts' helpers/labels.py; 255: not a training class
CITYSCAPES_LABELS = (
    ("unlabeled", 0, 255, (0, 0, 0)), ("ego vehicle", 1, 255, (0, 0, 0)),
    ("rectification border", 2, 255, (0, 0, 0)), ("out of roi", 3, 255, (0, 0, 0)),
    ("static", 4, 255, (0, 0, 0)), ("dynamic", 5, 255, (111, 74, 0)), ("ground", 6, 255, (81, 0, 81)),
    ("road", 7, 0, (128, 64, 128)), ("sidewalk", 8, 1, (244, 35, 232)), ("parking", 9, 255, (250, 170, 160)),
    ("rail track", 10, 255, (230, 150, 140)), ("building", 11, 2, (70, 70, 70)), ("wall", 12, 3, (102, 102, 156)),
    ("fence", 13, 4, (190, 153, 153)), ("guard rail", 14, 255, (180, 165, 180)),
    ("bridge", 15, 255, (150, 100, 100)), ("tunnel", 16, 255, (150, 120, 90)), ("pole", 17, 5, (153, 153, 153)),
    ("polegroup", 18, 255, (153, 153, 153)), ("traffic light", 19, 6, (250, 170, 30)),
    ("traffic sign", 20, 7, (220, 220, 0)), ("vegetation", 21, 8, (107, 142, 35)),
    ("terrain", 22, 9, (152, 251, 152)), ("sky", 23, 10, (70, 130, 180)), ("person", 24, 11, (220, 20, 60)),
    ("rider", 25, 12, (255, 0, 0)), ("car", 26, 13, (0, 0, 142)), ("truck", 27, 14, (0, 0, 70)),
    ("bus", 28, 15, (0, 60, 100)), ("caravan", 29, 255, (0, 0, 90)), ("trailer", 30, 255, (0, 0, 110)),
    ("train", 31, 16, (0, 80, 100)), ("motorcycle", 32, 17, (0, 0, 230)), ("bicycle", 33, 18, (119, 11, 32)),
)  # fmt: skip
# labels.py's license plate has labelId -1 and is never in a labelIds file; SPADE and OASIS still
# count it, as label channel 34 (label_nc 35), so synthesis names it too.
LICENSE_PLATE = ("license plate", 34, 255, (0, 0, 142))

TRAIN_CLASSES = tuple(name for name, _, train_id, _ in sorted(CITYSCAPES_LABELS, key=lambda r: r[2]) if train_id != 255)
TRAIN_PALETTE = tuple(colour for _, _, train_id, colour in sorted(CITYSCAPES_LABELS, key=lambda r: r[2])
                      if train_id != 255)
LABEL_ID_CLASSES = tuple(row[0] for row in (*CITYSCAPES_LABELS, LICENSE_PLATE))
LABEL_ID_PALETTE = tuple(row[3] for row in (*CITYSCAPES_LABELS, LICENSE_PLATE))
LABEL_ID_TO_TRAIN_ID = lookup_table((label_id, train_id) for _, label_id, train_id, _ in CITYSCAPES_LABELS)
TRAIN_ID_VALUES = (*range(len(TRAIN_CLASSES)), IGNORE)
LABEL_FILES = {"labelIds": "_gtFine_labelIds.png", "labelTrainIds": "_gtFine_labelTrainIds.png"}
IMAGE_SUFFIX = "_leftImg8bit.png"
INSTANCE_SUFFIX = "_gtFine_instanceIds.png"


@DATASETS.register()
class Cityscapes(PublishedDataset):
    """root: the folder holding leftImg8bit/ and gtFine/; split: train, val or test.
    labels: segmentation (19 trainIds, 255 ignored) or synthesis (the 35 labelIds as they are).
    label_files: labelIds (as published) or labelTrainIds (converted; segmentation only, same result).
    instance_edges: samples also hold "edges", SPADE's instance-edge map of *_gtFine_instanceIds.png,
    computed after the pipeline moved the instance ids with the labels (synthesis only)."""

    published_counts = {"train": 2975, "val": 500, "test": 1525}

    def __init__(self, root: str, split: str = "train", labels: str = "segmentation",
                 label_files: str = "labelIds", pipeline: Sequence = (), instance_edges: bool = False,
                 encoding_check: bool = True):
        check_labels_option(labels)
        if instance_edges and labels != "synthesis":
            raise ValueError("instance_edges: SPADE's instance-edge channel is for labels: synthesis")
        self.instance_edges = bool(instance_edges)
        if label_files not in LABEL_FILES:
            raise ValueError(f"label_files must be labelIds or labelTrainIds, got {label_files!r}")
        if labels == "synthesis" and label_files == "labelTrainIds":
            raise ValueError("label_files: labelTrainIds has lost the 35 labelIds that labels: synthesis reads; "
                             "use label_files: labelIds")
        self.label_files = label_files
        synthesis = labels == "synthesis"
        super().__init__(pipeline=pipeline, classes=LABEL_ID_CLASSES if synthesis else TRAIN_CLASSES,
                         ignore_index=IGNORE, palette=LABEL_ID_PALETTE if synthesis else TRAIN_PALETTE)
        self.split = split_folder(split, {s: s for s in ("train", "val", "test")}, "Cityscapes")
        root = require_folder(os.path.expanduser(str(root)), "Cityscapes root")
        image_dir = require_folder(os.path.join(root, "leftImg8bit", self.split),
                                   "leftImg8bit/<split> of leftImg8bit_trainvaltest.zip")
        label_dir = require_folder(os.path.join(root, "gtFine", self.split),
                                   "gtFine/<split> of gtFine_trainvaltest.zip")
        suffix = LABEL_FILES[label_files]
        self.label_pattern = f"*{suffix}"
        images = files_in_subfolders(image_dir, IMAGE_SUFFIX)
        label_files_found = files_in_subfolders(label_dir, suffix)
        stems = pair_or_refuse(images, label_files_found, image_dir, label_dir, f"*{IMAGE_SUFFIX}", f"*{suffix}")
        self._set_paths(stems, image_dir, [images[s] for s in stems], label_dir, [label_files_found[s] for s in stems])
        if label_files == "labelTrainIds":
            self.table, self.allowed_values = identity_table(TRAIN_ID_VALUES), allowed(TRAIN_ID_VALUES)
            self.stored_values = "the trainIds 0..18 and 255 of a labelTrainIds file"
        else:
            self.table = LABEL_ID_TO_TRAIN_ID if not synthesis else identity_table(range(len(CITYSCAPES_LABELS)))
            self.allowed_values = allowed(range(len(CITYSCAPES_LABELS)))
            self.stored_values = "the labelIds 0..33 of Cityscapes"
        if encoding_check:  # False: the user vouches for label_files (the look at a few maps skipped)
            self.probe_encoding()

    def encoding_mismatch(self, values_by_file: dict) -> str | None:
        """trainIds under the labelIds name: the maps read hold no id above 18 (a street scene's
        vegetation 21, sky 23, person 24 and car 26 are labelIds no trainIds map holds). One map of
        0..18 alone fits both; `check_stored` names a single one holding 255."""
        above_train_ids = any(((values >= len(TRAIN_CLASSES)) & (values != IGNORE)).any()
                              for values in values_by_file.values())
        if self.label_files != "labelIds" or above_train_ids:
            return None
        first = next(iter(values_by_file))
        return (f"{first}: none of the {len(values_by_file)} *_gtFine_labelIds.png maps read holds an id above 18, "
                "the values of labelTrainIds maps (trainIds 0..18), not labelIds 0..33: put the published "
                "*_gtFine_labelIds.png files back, or read converted files with label_files: labelTrainIds")

    def check_stored(self, path: str, present: np.ndarray) -> None:
        if self.label_files == "labelIds" and IGNORE in present and all(v < len(TRAIN_CLASSES) or v == IGNORE
                                                                        for v in present):
            # a labelIds file never holds 255; 0..18 with 255 is a trainIds map under the labelIds name
            raise DataError(f"{path}: holds only {[int(v) for v in present]}, the values of a labelTrainIds map "
                            "(trainIds 0..18, 255 ignored), not labelIds 0..33: put the published "
                            "*_gtFine_labelIds.png files back, or read converted files with "
                            "label_files: labelTrainIds")
        super().check_stored(path, present)

    def __getitem__(self, item: int | tuple[int, int]) -> dict:
        if not self.instance_edges:
            return super().__getitem__(item)
        index, seed = split_item(item)
        image, mask, name = self.load_sample(index)
        self._check_sample(index, name, image, mask)
        path = self.mask_path(index)[: -len(LABEL_FILES["labelIds"])] + INSTANCE_SUFFIX
        instance_ids = read_label_file(path, f"*{INSTANCE_SUFFIX}, 16-bit instance ids")
        if instance_ids.shape != mask.shape:
            raise DataError(f"{path}: the instance map is {instance_ids.shape[0]}x{instance_ids.shape[1]} but its "
                            f"labels are {mask.shape[0]}x{mask.shape[1]}")
        # uint16 (ids up to 33999) moves through the pipeline as a mask does (nearest, same flips)
        augmented = self.augment(index, seed, image=image, mask=mask, masks=[instance_ids.astype(np.uint16)])
        return {"image": self._image_tensor(augmented["image"]), "mask": self._mask_tensor(augmented["mask"]),
                "edges": torch.from_numpy(instance_edges(np.asarray(augmented["masks"][0]))),
                "index": index, "name": name}


def instance_edges(instance_ids: np.ndarray) -> np.ndarray:
    """SPADE's instance-edge map: 1 where a pixel's instance id differs from one of its 4
    neighbours' (both pixels of such a pair are edges), else 0; uint8, the map's size."""
    edges = np.zeros(instance_ids.shape, dtype=bool)
    across = instance_ids[:, 1:] != instance_ids[:, :-1]
    down = instance_ids[1:, :] != instance_ids[:-1, :]
    edges[:, 1:] |= across
    edges[:, :-1] |= across
    edges[1:, :] |= down
    edges[:-1, :] |= down
    return edges.astype(np.uint8)

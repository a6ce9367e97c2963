"""Pascal VOC 2012 as downloaded (VOCtrainval_11-May-2012.tar: `root` = VOCdevkit/VOC2012), and
its `trainaug` split with the SBD labels (benchmark.tgz: `sbd_root` = benchmark_RELEASE/):

    root/JPEGImages/<name>.jpg
    root/SegmentationClass/<name>.png          (palette PNG: the palette index is the class, 255 borders)
    root/ImageSets/Segmentation/<split>.txt    (train 1464, val 1449 names)
    sbd_root/dataset/{train,val}.txt, sbd_root/dataset/cls/<name>.mat   (GTcls.Segmentation, 0..20)

trainaug = (VOC train | SBD train | SBD val) - VOC val: 10582 names, the set DeepLab trains on. A
name in VOC's train list keeps VOC's own map (its 255 borders included); the others take SBD's
.mat, read directly (scipy.io), so nothing is written into the user's folders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from framework.data.folder import (
    _FolderDataset,
    files_by_stem,
    read_index_mask,
    read_split_file,
    require_all,
    require_dir,
)
from framework.errors import DataError
from framework.registry import DATASETS

VOC_CLASSES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
    "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip
PUBLISHED_COUNTS = {"train": 1464, "val": 1449, "trainval": 2913, "trainaug": 10582}
SBD_CLASS_VALUES = 21  # SBD's GTcls.Segmentation holds 0..20: no 255 borders


def sbd_folder(sbd_root: str) -> str:
    """benchmark_RELEASE/dataset (or that folder itself), where SBD's cls/ and lists are."""
    sbd_root = require_dir(os.path.expanduser(str(sbd_root)))
    inner = os.path.join(sbd_root, "dataset")
    folder = inner if os.path.isdir(inner) else sbd_root
    if not os.path.isdir(os.path.join(folder, "cls")):
        raise DataError(f"sbd_root {sbd_root}: no dataset/cls/ folder; point sbd_root at SBD's benchmark_RELEASE/")
    return folder


def trainaug_names(voc_train: list[str], voc_val: list[str], sbd_train: list[str], sbd_val: list[str]) -> list[str]:
    """(VOC train | SBD train | SBD val) - VOC val, sorted."""
    return sorted((set(voc_train) | set(sbd_train) | set(sbd_val)) - set(voc_val))


def read_sbd_mat(path: str) -> np.ndarray:
    """SBD's class map: GTcls.Segmentation of a cls/<name>.mat, H x W uint8 class ids 0..20."""
    from scipy.io import loadmat  # only trainaug needs scipy's loader: imported when a .mat is read

    try:
        segmentation = loadmat(path, squeeze_me=True, struct_as_record=False)["GTcls"].Segmentation
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as err:
        raise DataError(f"{path}: cannot read SBD's GTcls.Segmentation ({type(err).__name__}: {err})") from err
    segmentation = np.asarray(segmentation)
    if segmentation.ndim != 2 or segmentation.dtype.kind not in "iu":
        raise DataError(f"{path}: GTcls.Segmentation is {segmentation.dtype} {segmentation.shape}, not an H x W "
                        "map of class ids")
    outside = sorted({int(v) for v in np.unique(segmentation) if not 0 <= v < SBD_CLASS_VALUES})
    if outside:
        raise DataError(f"{path}: label value(s) {outside[:10]} outside SBD's class ids 0..20")
    return segmentation.astype(np.uint8)


@DATASETS.register()
class VOCSegmentation(_FolderDataset):
    """Pascal VOC: root/JPEGImages/<id>.jpg, root/SegmentationClass/<id>.png and the ids of
    root/ImageSets/Segmentation/<split>.txt; `split: trainaug` with `sbd_root` adds SBD's labels."""

    def __init__(
        self,
        root: str,
        split: str = "train",
        classes: Sequence[str] = VOC_CLASSES,
        pipeline: Sequence = (),
        ignore_index: int = 255,
        palette: Sequence[Sequence[int]] | None = None,
        sbd_root: str | None = None,
    ):
        # The base class's default palette is VOC's own colour map.
        super().__init__(pipeline=pipeline, classes=classes, ignore_index=ignore_index, palette=palette)
        self.split = split
        root = require_dir(os.path.expanduser(str(root)))
        self.image_dir = require_dir(os.path.join(root, "JPEGImages"))
        voc_masks = require_dir(os.path.join(root, "SegmentationClass"))
        lists = os.path.join(root, "ImageSets", "Segmentation")
        # the names as found (the suffix matched without case: 2007_000032.JPG is read as it is named)
        images = files_by_stem(self.image_dir, [".jpg"])
        if split == "trainaug":
            if sbd_root is None:
                raise ValueError("split: trainaug needs sbd_root, SBD's benchmark_RELEASE/ folder (VOC's own "
                                 "train list has 1464 names; trainaug adds SBD's for 10582)")
            ids, mask_paths = self._trainaug(lists, voc_masks, sbd_folder(sbd_root))
            require_all(ids, images, "image (.jpg)", self.image_dir)
        else:
            if sbd_root is not None:
                raise ValueError(f"sbd_root is read by split: trainaug only, not split: {split}")
            ids = read_split_file(os.path.join(lists, f"{split}.txt"))
            require_all(ids, images, "image (.jpg)", self.image_dir)
            masks = files_by_stem(voc_masks, [".png"])
            require_all(ids, masks, "mask (.png)", voc_masks)
            mask_paths = [os.path.join(voc_masks, masks[i]) for i in ids]
        self.mask_dir = ""  # whole paths: a trainaug sample's map is in VOC's folder or SBD's
        self._set_samples(ids, [images[i] for i in ids], mask_paths)

    @staticmethod
    def _trainaug(lists: str, voc_masks: str, sbd: str) -> tuple[list[str], list[str]]:
        voc_train = read_split_file(os.path.join(lists, "train.txt"))
        voc_val = read_split_file(os.path.join(lists, "val.txt"))
        sbd_train = read_split_file(os.path.join(sbd, "train.txt"))
        sbd_val = read_split_file(os.path.join(sbd, "val.txt"))
        ids = trainaug_names(voc_train, voc_val, sbd_train, sbd_val)
        in_voc_train = set(voc_train)
        sbd_ids = [i for i in ids if i not in in_voc_train]
        masks = files_by_stem(voc_masks, [".png"])
        require_all([i for i in ids if i in in_voc_train], masks, "mask (.png)", voc_masks)
        cls = os.path.join(sbd, "cls")
        class_maps = files_by_stem(cls, [".mat"])
        require_all(sbd_ids, class_maps, "SBD class map (.mat)", cls)
        paths = [os.path.join(voc_masks, masks[i]) if i in in_voc_train else os.path.join(cls, class_maps[i])
                 for i in ids]
        return ids, paths

    @property
    def published_count(self) -> int | None:
        """The published number of samples of this split (tools/check_dataset.py compares), or None."""
        return PUBLISHED_COUNTS.get(self.split)

    def read_mask(self, index: int) -> np.ndarray:
        """Sample `index`'s class map as training reads it: palette indices of VOC's PNG, or SBD's .mat."""
        path = self.mask_path(index)
        return read_sbd_mat(path) if path.lower().endswith(".mat") else read_index_mask(path)

    def load_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        return self.read_image(index), self.read_mask(index), str(self.names[index])

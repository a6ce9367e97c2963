"""One pass over a segmentation dataset's files, before augmentation: what each sample holds
(class pixel counts, image size, an EXIF orientation its image is read turned by) and what is
wrong with it (unreadable image, colour mask, mask values outside the classes, mask and image
sizes differing).

Used by tools/check_dataset.py (the dataset doctor) and by `weight: auto` class weights;
`check_label_maps` is the start-up check of the masks (and only the headers of their images) for
a task that one-hot encodes labels (semantic synthesis, framework/engine/label_map_data.py: a
value >= num_classes there is "scatter index out of bounds", a label map of another size than
its image fails when a worker reads the pair, iterations in).
Samples are read in DataLoader workers; each yields a small record, never the pixels.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import cv2
import numpy as np
import torch
from PIL import Image

from framework.data.base import SegmentationDataset
from framework.data.folder import exif_orientation, exif_size_hint, read_index_mask, read_rgb_image
from framework.data.label_folders import shown_size
from framework.errors import DataError

logger = logging.getLogger("framework")
MAX_FILES_SHOWN = 5


@dataclass
class SampleRecord:
    index: int
    name: str
    size: tuple[int, int] | None = None  # image height, width
    counts: np.ndarray | None = None  # pixels per class (valid pixels only)
    problems: list[str] = field(default_factory=list)
    colours: list[tuple[int, int, int]] = field(default_factory=list)  # of an RGB mask
    orientation: int = 1  # the EXIF orientation the image was read turned by (1: as stored)
    ignored: int = 0  # pixels of ignore_index


def read_mask_raw(path: str) -> np.ndarray:
    """A mask as stored: H x W indices (palette or grey PNG) or H x W x 3 RGB colours."""
    try:
        with Image.open(path) as mask:
            if mask.mode == "P":
                return np.asarray(mask)
            if mask.mode in ("RGB", "RGBA"):
                return np.asarray(mask.convert("RGB"))
    except OSError as err:
        raise DataError(f"cannot read mask ({err})") from err
    mask = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if mask is None:
        raise DataError("cannot read mask")
    return mask


def _read_files(dataset: SegmentationDataset, index: int, record: SampleRecord):
    """(image or None, mask or None), problems noted in `record` under each file's path."""
    if not hasattr(dataset, "image_path"):  # a generated dataset: load through the dataset
        try:
            image, mask, _ = dataset.load_sample(index)
            return image, mask
        except DataError as err:
            record.problems.append(str(err))
            return None, None
    image_path, mask_path = dataset.image_path(index), dataset.mask_path(index)
    try:  # as training reads it: RGB, or the dataset's channels
        image = dataset.read_image(index) if hasattr(dataset, "read_image") else read_rgb_image(image_path)
    except DataError as err:
        record.problems.append(str(err))
        image = None
    if image is not None and getattr(dataset, "channels", None) is None:
        record.orientation = read_turned_by(image_path, image)
    try:
        mask = read_inspected_mask(dataset, index, mask_path)
    except DataError as err:
        record.problems.append(str(err) if str(err).startswith(mask_path) else f"{mask_path}: {err}")
        mask = None
    return image, mask


def read_inspected_mask(dataset: SegmentationDataset, index: int, path: str) -> np.ndarray:
    """A mask as the tools inspect it: through the dataset's own reader where the stored values are
    not the classes (a published layout's table, `maps_stored_labels`) or the file is no image
    (SBD's .mat); else as stored, so a colour mask's colours can be listed and converted."""
    reader = getattr(dataset, "read_mask", None)
    if reader is not None and (getattr(dataset, "maps_stored_labels", False) or path.lower().endswith(".mat")):
        return reader(index)
    return read_mask_raw(path)


def read_turned_by(image_path: str, image: np.ndarray) -> int:
    """The EXIF orientation by which `image` (read from `image_path` as RGB) differs from the
    file's stored pixels; 1 when it shows them as stored."""
    orientation = exif_orientation(image_path)
    if orientation == 1:
        return 1
    stored = cv2.imread(image_path, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if stored is not None and np.array_equal(stored[..., ::-1], image):
        return 1  # this OpenCV does not apply the tag for this format, or it changes nothing
    return orientation  # turned; or read with Pillow, which turns it (read_rgb_image)


def mask_value_problem(values: np.ndarray, lowest: int, dataset: SegmentationDataset, where: str) -> str | None:
    """The line naming a mask's values outside [0, num_classes) other than ignore_index, or None.
    `values`: the mask's pixel count per value (negatives clipped to 0), `lowest`: its minimum."""
    bad = [int(v) for v in np.flatnonzero(values) if v >= dataset.num_classes and v != dataset.ignore_index]
    shown = bad + ([lowest] if lowest < 0 else [])
    if not shown:
        return None
    return f"{where}: mask values {shown} outside [0, {dataset.num_classes}) (ignore_index {dataset.ignore_index})"


def inspect_sample(dataset: SegmentationDataset, index: int) -> SampleRecord:
    record = SampleRecord(index, str(dataset.names[index]) if hasattr(dataset, "names") else str(index))
    image, mask = _read_files(dataset, index, record)
    where = dataset.mask_path(index)
    if image is not None:
        record.size = tuple(image.shape[:2])
    if mask is None:
        return record
    if mask.ndim == 3:
        colours = np.unique(mask.reshape(-1, mask.shape[2])[:, :3], axis=0)
        record.colours = [tuple(int(v) for v in c) for c in colours]
        record.problems.append(f"{where}: RGB colour mask ({len(colours)} colours); masks must hold class indices")
        return record
    if image is not None and mask.shape != image.shape[:2]:
        hint = dataset.size_mismatch_hint(index, image, mask)  # the dataset's own, as in training
        record.problems.append(f"{where}: mask is {mask.shape[0]}x{mask.shape[1]} "
                               f"but its image is {image.shape[0]}x{image.shape[1]}{hint}")
    values = np.bincount(mask.ravel().astype(np.int64).clip(0), minlength=dataset.num_classes)
    problem = mask_value_problem(values, int(mask.min()) if mask.size else 0, dataset, where)
    if problem:
        record.problems.append(problem)
    record.counts = values[: dataset.num_classes]
    record.ignored = int(values[dataset.ignore_index]) if 0 <= dataset.ignore_index < len(values) else 0
    if not problem and mask.size and not record.counts.any():
        record.problems.append(f"{where}: every pixel is ignore_index {dataset.ignore_index}: "
                               "the sample adds nothing to the loss or the metrics")
    return record


class _Inspections(torch.utils.data.Dataset):
    def __init__(self, dataset: SegmentationDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> SampleRecord:
        return inspect_sample(self.dataset, index)


def _as_is(record: SampleRecord) -> SampleRecord:
    return record


def scan(dataset: SegmentationDataset, workers: int = 0, on_record=None) -> list[SampleRecord]:
    """Inspect every sample (in `workers` processes); `on_record(done)` after each one."""
    return collect_records(_Inspections(dataset), workers, on_record)


def collect_records(inspections, workers: int = 0, on_record=None) -> list:
    """Every record an indexable of inspections gives, read in `workers` processes in order;
    `on_record(done)` after each one (the progress bar of tools/check_dataset.py)."""
    loader = torch.utils.data.DataLoader(inspections, batch_size=None, num_workers=workers, collate_fn=_as_is)
    records = []
    for record in loader:
        records.append(record)
        if on_record is not None:
            on_record(len(records))
    return records


def class_totals(records: list[SampleRecord], num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pixels per class, pixels of the images containing each class, images containing each class)."""
    pixels = np.zeros(num_classes, dtype=np.int64)
    image_pixels = np.zeros(num_classes, dtype=np.int64)
    images = np.zeros(num_classes, dtype=np.int64)
    for record in records:
        if record.counts is None:
            continue
        present = record.counts > 0
        pixels += record.counts
        image_pixels += present * record.counts.sum()
        images += present
    return pixels, image_pixels, images


class _LabelMapProblems(torch.utils.data.Dataset):
    """Sample i -> the line naming what is wrong with its label map, or "": its size against its
    image's (the image file's header only), then its values (masks only, as training reads them)."""

    def __init__(self, dataset: SegmentationDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[str, bool]:
        """(the problem or "", whether the map holds a labelled pixel)."""
        where = self.dataset.mask_path(index)
        try:
            if hasattr(self.dataset, "image_path"):  # a folder dataset: the mask file, the image's header
                read = getattr(self.dataset, "read_mask", None)  # a published layout maps its stored labels
                mask = read(index) if read is not None else read_index_mask(where)
                image_size = self._image_size(index)
            else:
                image, mask, _ = self.dataset.load_sample(index)
                image_size = image.shape[:2]
        except DataError as err:
            return str(err), True
        if image_size is not None and tuple(mask.shape[:2]) != tuple(image_size):
            hint = self._size_hint(index, image_size, mask.shape[:2])
            return (f"{where}: mask is {mask.shape[0]}x{mask.shape[1]} but its image is "
                    f"{image_size[0]}x{image_size[1]}{hint}"), True
        values = np.bincount(mask.ravel().astype(np.int64).clip(0), minlength=self.dataset.num_classes)
        problem = mask_value_problem(values, int(mask.min()) if mask.size else 0, self.dataset, where) or ""
        return problem, bool(values[: self.dataset.num_classes].any())

    def _read_as_shown(self) -> bool:
        return getattr(self.dataset, "channels", None) is None  # N channels are read as stored

    def _image_size(self, index: int) -> tuple[int, int] | None:
        """As training reads the image (None when unreadable: the sample's read names it)."""
        return shown_size(self.dataset.image_path(index), turned_by_exif=self._read_as_shown())

    def _size_hint(self, index: int, image_size, mask_size) -> str:
        if not hasattr(self.dataset, "image_path") or not self._read_as_shown():
            return ""
        return exif_size_hint(self.dataset.image_path(index), image_size, mask_size)


def check_label_maps(dataset: SegmentationDataset, workers: int = 0, where: str = "dataset") -> None:
    """Refuse, before training, label maps holding values outside [0, num_classes) other than the
    ignore label, or of another size than their image: one DataError naming the first such file
    (its values, or both sizes), and how many more. A split none of whose maps holds a labelled
    pixel (every pixel the ignore label) is refused too: D's loss would be 0 and every score NaN;
    where more than half hold none, one warning names them."""
    loader = torch.utils.data.DataLoader(_LabelMapProblems(dataset), batch_size=None, num_workers=workers)
    checked = list(loader)
    problems = [problem for problem, _ in checked if problem]
    if problems:
        more = f" (and {len(problems) - 1} more file(s); python tools/check_dataset.py lists them)" if len(problems) > 1 else ""
        raise DataError(problems[0] + more)
    unlabelled = [dataset.mask_path(index) for index, (_, labelled) in enumerate(checked) if not labelled]
    if checked and len(unlabelled) == len(checked):
        raise DataError(f"{where}: none of its {len(checked)} label maps holds a labelled pixel (every pixel is "
                        f"ignore_index {dataset.ignore_index}, e.g. {unlabelled[0]}): there is nothing to learn")
    if len(unlabelled) * 2 > len(checked):
        shown = ", ".join(map(str, unlabelled[:MAX_FILES_SHOWN])) + (", ..." if len(unlabelled) > MAX_FILES_SHOWN else "")
        logger.warning(f"{where}: {len(unlabelled)} of its {len(checked)} label maps hold no labelled pixel (every "
                       f"pixel is ignore_index {dataset.ignore_index}): {shown}")

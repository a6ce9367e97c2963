"""What the published-dataset readers share: 256-entry label lookup tables, listing a split's
files by stem, pairing images with label files, and reading a label file as an index map.

Each reader (Cityscapes, ADE20K, COCO-Stuff, VOC + SBD) keeps its pairing rule, its table and its
class names and palette beside each other; the samples are paths only (numpy string arrays), and
one label map is read and mapped at a time, in the worker that loads the sample.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
from PIL import Image

from framework.data.folder import MAX_NAMES_IN_MESSAGE, _FolderDataset, read_rgb_image
from framework.errors import DataError

IGNORE = 255  # the value every published reader gives pixels that are no class
LABEL_MODES = ("segmentation", "synthesis")
# label maps read at start-up to tell the expected encoding from another one of the same values
# (1-based COCO-Stuff ids, an ADE20K export already shifted to 0-based, trainIds under the labelIds name)
ENCODING_PROBE_FILES = 8


def lookup_table(pairs: Iterable[tuple[int, int]], default: int = IGNORE) -> np.ndarray:
    """A 256-entry uint8 table: table[stored value] = the label it becomes; `default` elsewhere.
    `table[mask]` maps a whole uint8 label map in one numpy gather, with no Python per pixel."""
    table = np.full(256, default, dtype=np.uint8)
    for stored, label in pairs:
        table[stored] = label
    return table


def identity_table(values: Iterable[int]) -> np.ndarray:
    return lookup_table((v, v) for v in values)


def listed(names: Sequence[str]) -> str:
    return ", ".join(names[:MAX_NAMES_IN_MESSAGE]) + (", ..." if len(names) > MAX_NAMES_IN_MESSAGE else "")


def check_labels_option(labels: str) -> str:
    if labels not in LABEL_MODES:
        raise ValueError(f"labels must be one of {', '.join(LABEL_MODES)}, got {labels!r}")
    return labels


def split_folder(split: str, aliases: dict[str, str], dataset: str) -> str:
    """The folder name of `split` (an accepted alias or the published name)."""
    if split not in aliases:
        raise ValueError(f"split must be one of {', '.join(aliases)} for {dataset}, got {split!r}")
    return aliases[split]


def files_with_suffix(folder: str, suffix: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """{stem: file name} of the files of `folder` ending in `suffix` (and in none of `skip`).
    One os.scandir, no stat per file: 20k names list in well under a second."""
    found = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(suffix) and not name.endswith(skip):
                found[name[: -len(suffix)]] = name
    return found


def files_in_subfolders(folder: str, suffix: str) -> dict[str, str]:
    """{stem: "<subfolder>/<file name>"} over the subfolders of `folder` (Cityscapes' cities)."""
    found = {}
    with os.scandir(folder) as cities:
        for city in cities:
            if city.is_dir():
                for stem, name in files_with_suffix(city.path, suffix).items():
                    found[stem] = f"{city.name}/{name}"
    return found


def pair_or_refuse(images: dict[str, str], labels: dict[str, str], image_dir: str, label_dir: str,
                   image_pattern: str, label_pattern: str) -> list[str]:
    """The sorted stems that have both an image and a label file; a DataError naming a few of
    the unpaired stems of each side and their counts, or the empty split, otherwise."""
    if not images:
        raise DataError(f"{image_dir}: no images ({image_pattern}): an empty split; is root the folder "
                        "the dataset was unpacked to?")
    lone_images = sorted(images.keys() - labels.keys())
    lone_labels = sorted(labels.keys() - images.keys())
    if lone_images or lone_labels:
        parts = []
        if lone_images:
            parts.append(f"{len(lone_images)} of {len(images)} image(s) in {image_dir} have no {label_pattern} "
                         f"in {label_dir}: {listed(lone_images)}")
        if lone_labels:
            parts.append(f"{len(lone_labels)} of {len(labels)} label file(s) in {label_dir} have no "
                         f"{image_pattern} in {image_dir}: {listed(lone_labels)}")
        raise DataError("unpaired files: " + "; ".join(parts))
    return sorted(images)


def read_label_file(path: str, expected: str) -> np.ndarray:
    """A label file's stored values, H x W (palette indices of a palette PNG, grey values, or
    16-bit values); an RGB colour picture is refused naming what was `expected` instead."""
    try:
        with Image.open(path) as opened:
            if opened.mode in ("RGB", "RGBA"):
                raise DataError(f"{path}: an RGB colour image, not an index map; expected {expected} (a colour "
                                "visualisation is not read as labels: its colours are not class ids)")
            return np.asarray(opened)
    except OSError as err:  # missing, truncated, not an image
        raise DataError(f"{path}: cannot read label file ({err})") from err


def values_present(stored: np.ndarray) -> np.ndarray:
    """The distinct values of a label map (a 256-bin count for uint8 maps: cheaper than sorting)."""
    if stored.dtype == np.uint8:
        return np.flatnonzero(np.bincount(stored.ravel(), minlength=256))
    return np.unique(stored)


def refuse_values_outside(path: str, present: np.ndarray, allowed: np.ndarray, what: str) -> None:
    """A DataError naming the file and its values that `allowed` (a 256-entry bool table) rejects."""
    outside = [int(v) for v in present if v < 0 or v > 255 or not allowed[v]]
    if outside:
        raise DataError(f"{path}: label value(s) {outside[:10]} outside {what}")


class PublishedDataset(_FolderDataset):
    """Images and label files of a split's folders; a label file is read, checked against the
    dataset's stored values (`allowed_values`, described as `stored_values`) and mapped through
    `table`. Subclasses set those, the classes and palette, and call `_set_paths`."""

    table: np.ndarray
    allowed_values: np.ndarray  # 256 bools: which stored values a label file may hold
    stored_values = ""  # how the stored values are described in a refusal
    label_pattern = ""  # what a label file is, in messages
    published_counts: dict[str, int] = {}  # split -> the published number of samples
    maps_stored_labels = True  # the stored values are not the classes: tools read masks with read_mask
    split = ""

    def _set_paths(self, names: list[str], image_dir: str, image_files: list[str], label_dir: str,
                   label_files: list[str]) -> None:
        """File names relative to the split's folders: 118k COCO-Stuff paths in full would be ~85 MB
        of numpy strings (4 bytes a character), the relative ones a third of that."""
        self.image_dir, self.mask_dir = image_dir, label_dir
        self._set_samples(names, image_files, label_files)

    @property
    def published_count(self) -> int | None:
        """The published number of samples of this split (tools/check_dataset.py compares), or None."""
        return self.published_counts.get(self.split)

    def read_stored_labels(self, index: int) -> np.ndarray:
        """The label file's values as stored, checked against the dataset's range."""
        path = self.mask_path(index)
        stored = read_label_file(path, self.label_pattern)
        if stored.ndim != 2:
            raise DataError(f"{path}: {stored.shape[2]} channels, not an index map; expected {self.label_pattern}")
        self.check_stored(path, values_present(stored))
        return stored

    def check_stored(self, path: str, present: np.ndarray) -> None:
        """Refuse a label file (`path`) whose distinct stored values `present` are not the dataset's."""
        refuse_values_outside(path, present, self.allowed_values, self.stored_values)

    def probe_encoding(self) -> None:
        """Read up to ENCODING_PROBE_FILES label files spread over the split and refuse (DataError, one
        line naming a file) when `encoding_mismatch` finds another encoding than the one configured:
        one file's values often fit both encodings, a few files' values together rarely do. Unreadable
        files are skipped here: reading the sample names them (and check_dataset lists them)."""
        count = len(self.names)
        picks = sorted(set(np.linspace(0, count - 1, min(count, ENCODING_PROBE_FILES)).round().astype(int)))
        values_by_file = {}
        for index in picks:
            path = self.mask_path(index)
            try:
                stored = read_label_file(path, self.label_pattern)
            except DataError:
                continue
            if stored.ndim == 2:
                values_by_file[path] = values_present(stored)
        problem = self.encoding_mismatch(values_by_file) if values_by_file else None
        if problem:  # a look at a few files can be wrong about a user's own tree: say how to skip it
            raise DataError(f"{problem} (if the files are as the dataset publishes them, encoding_check: false "
                            "skips this look)")

    def encoding_mismatch(self, values_by_file: dict[str, np.ndarray]) -> str | None:
        """The line naming a file whose values, with the other files read (path -> distinct stored
        values), show another encoding than the configured one; None when they fit."""
        return None

    def read_mask(self, index: int) -> np.ndarray:
        """Sample `index`'s label map as training reads it: the labels it becomes (uint8)."""
        return self.table[self.read_stored_labels(index)]

    def load_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, str]:
        return read_rgb_image(self.image_path(index)), self.read_mask(index), str(self.names[index])


def allowed(values: Iterable[int]) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[list(values)] = True
    return table


def require_folder(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise DataError(f"{path}: folder not found ({what})")
    return path

"""The folders a dataset reads its files from, for the tools that write beside data
(tools/test.py --show-dir, tools/browse_dataset.py, tools/check_dataset.py --convert-rgb-masks),
which refuse an output folder among them (framework/runtime/overwrite.py).

Read from the dataset's attributes, whatever the dataset's type, so a dataset written in a
project or a user's module is covered without declaring anything: every attribute naming an
existing folder (`root`, `image_dir`, `mask_dir`, `dir_a`, ...) and the folders of every list of
file paths (`image_files`, `files`, `files_a`, ...). Another dataset held as an attribute (a
wrapper's) is read the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
from torch.utils.data import Dataset


def folders_read_by(dataset: object) -> list[str]:
    """Existing folders named by `dataset`'s attributes or holding the files it lists, in
    attribute order, each once."""
    found: dict[str, None] = {}
    _collect(dataset, found, seen=set())
    return list(found)


def _collect(dataset: object, found: dict[str, None], seen: set[int]) -> None:
    if id(dataset) in seen:
        return
    seen.add(id(dataset))
    for value in vars(dataset).values() if hasattr(dataset, "__dict__") else ():
        if isinstance(value, Dataset):
            _collect(value, found, seen)
        elif isinstance(value, (str, os.PathLike)):
            _add_folder(os.fspath(value), found)
        elif isinstance(value, (list, tuple, np.ndarray)) and len(value) and _all_paths(value):
            for folder in dict.fromkeys(os.path.dirname(os.fspath(path)) for path in value):
                _add_folder(folder, found)


def _all_paths(values: Iterable) -> bool:
    return all(isinstance(value, (str, os.PathLike)) and os.sep in os.fspath(value) for value in values)


def _add_folder(path: str, found: dict[str, None]) -> None:
    if path and os.path.isdir(path):
        found.setdefault(path, None)

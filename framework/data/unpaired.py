"""Unpaired image datasets (CycleGAN): two domains, A and B, with no correspondence between them.

A subclass says how many images each domain holds and loads one of either; the base pairs
them up, augments each side with its own draw of the pipeline and returns uint8 tensors:

    {"a": uint8 3xHxW, "b": uint8 3xHxW, "name_a": str, "name_b": str, "index": int}

Which B goes with sample i (A[i mod |A|]; the dataset is max(|A|, |B|) long, as the original
CycleGAN's):
- training (the sampler gives each sample a seed, framework/data/sampler.py): a B drawn from the
  sample's seed, so it is reproducible, the same on resume and under DDP, and changes with the
  epoch; `serial: true` takes B[i mod |B|] instead.
- evaluation (no seed): the B of the same name when the two domains hold the same names (test
  folders that pair by name, e.g. testA/x.png and testB/x.png: `paired_by_name`), else B[i mod |B|].

`cache: memory` / `auto` (framework/data/cache.py) keep every image of both domains decoded once:
the cache stands in for `load_images(i)`, which gives (A[i], B[i]) for i < max(|A|, |B|), None
where a domain has fewer images.

`UnpairedImageFolders` reads `<root>/<split>A` and `<root>/<split>B` (the layout of the
original CycleGAN datasets: trainA, trainB, testA, testB) or two explicit folders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from framework.data.base import AugmentedDataset, mix64, split_item, stream_words
from framework.data.folder import IMAGE_SUFFIXES, files_by_stem, read_rgb_image, require_dir
from framework.data.images import check_rgb
from framework.errors import DataError
from framework.registry import DATASETS

# Side B's augmentation seed is derived from the sample's: its own crop and flip, not A's.
SIDE_B_SALT = 0xB0B


class UnpairedImageDataset(AugmentedDataset):
    """Two unpaired image domains. Subclasses set `names_a`/`names_b` (one per image, in
    order) and implement `load_a(i)` / `load_b(j)` -> HxWx3 uint8 RGB."""

    names_a: Sequence[str] = ()
    names_b: Sequence[str] = ()

    def __init__(self, pipeline: Sequence = (), serial: bool = False):
        super().__init__(pipeline)
        self.serial = bool(serial)

    def load_a(self, index: int) -> np.ndarray:
        raise NotImplementedError

    def load_b(self, index: int) -> np.ndarray:
        raise NotImplementedError

    def load_images(self, index: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(A[index] or None, B[index] or None): what the decoded cache keeps per index, so that
        over the dataset's max(|A|, |B|) indices each image of either domain is kept once."""
        a = self.load_a(index) if index < len(self.names_a) else None
        b = self.load_b(index) if index < len(self.names_b) else None
        return a, b

    def _read(self, side: int, index: int) -> np.ndarray:
        """Domain `side`'s (0: A, 1: B) image `index`: from the decoded cache when there is one
        (past its limit it decodes both of that index's images), else from the domain's loader."""
        if getattr(self, "decoded_cache", None) is not None:
            return self.load_images(index)[side]
        return self.load_a(index) if side == 0 else self.load_b(index)

    @property
    def paired_by_name(self) -> bool:
        """Whether every A has a B of the same name and vice versa (what paired metrics need)."""
        return len(self.names_a) == len(self.names_b) and set(self.names_a) == set(self.names_b)

    def __len__(self) -> int:
        return max(len(self.names_a), len(self.names_b))

    def b_index(self, index: int, seed: int | None) -> int:
        if seed is not None and not self.serial:
            return stream_words(seed, index, 1)[0] % len(self.names_b)
        if seed is None and self.paired_by_name:
            if not hasattr(self, "_b_by_name"):
                self._b_by_name = {name: j for j, name in enumerate(self.names_b)}
            return self._b_by_name[self.names_a[index % len(self.names_a)]]
        return index % len(self.names_b)

    def __getitem__(self, item: int | tuple[int, int]) -> dict:
        index, seed = split_item(item)
        a_index, b_index = index % len(self.names_a), self.b_index(index, seed)
        name_a, name_b = str(self.names_a[a_index]), str(self.names_b[b_index])
        a, b = self._read(0, a_index), self._read(1, b_index)
        check_rgb(a, f"{name_a} (A)")
        check_rgb(b, f"{name_b} (B)")
        a = self.augment(index, seed, image=a)["image"]
        b = self.augment(index, None if seed is None else mix64(seed ^ SIDE_B_SALT), image=b)["image"]
        return {"a": self._image_tensor(a), "b": self._image_tensor(b), "name_a": name_a, "name_b": name_b,
                "index": index}


@DATASETS.register()
class UnpairedImageFolders(UnpairedImageDataset):
    """`root` + `split` (train|test: `<root>/<split>A` and `<root>/<split>B`), or `dir_a` and
    `dir_b` (relative to `root` when it is given). The folders may hold different numbers of
    images; files are taken in name order."""

    def __init__(self, root: str | None = None, split: str = "train", dir_a: str | None = None,
                 dir_b: str | None = None, serial: bool = False, pipeline: Sequence = ()):
        super().__init__(pipeline, serial)
        if (dir_a is None) != (dir_b is None):
            raise ValueError("give both dir_a and dir_b, or neither (then root/<split>A and root/<split>B)")
        if dir_a is None:
            if root is None:
                raise ValueError("give root (with split) or dir_a and dir_b")
            dir_a, dir_b = f"{split}A", f"{split}B"
        base = os.path.expanduser(str(root)) if root is not None else ""
        self.dir_a, self.names_a, self.files_a = self._scan(os.path.join(base, os.path.expanduser(str(dir_a))))
        self.dir_b, self.names_b, self.files_b = self._scan(os.path.join(base, os.path.expanduser(str(dir_b))))

    @staticmethod
    def _scan(folder: str) -> tuple[str, list[str], list[str]]:
        files = files_by_stem(require_dir(folder), IMAGE_SUFFIXES)
        if not files:
            raise DataError(f"{folder}: no images (looked for {', '.join(IMAGE_SUFFIXES)})")
        names = sorted(files)
        return folder, names, [files[n] for n in names]

    def load_a(self, index: int) -> np.ndarray:
        return read_rgb_image(os.path.join(self.dir_a, self.files_a[index]))

    def load_b(self, index: int) -> np.ndarray:
        return read_rgb_image(os.path.join(self.dir_b, self.files_b[index]))

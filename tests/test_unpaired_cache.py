"""`cache: memory` / `auto` on CycleGAN's unpaired datasets: every image of both domains decoded
and kept once, the samples the same as uncached, and `auto` says what it decided, as for the
paired datasets."""

import shutil

import cv2
import numpy as np
import pytest
import torch

from framework.data.cache import cache_in_memory
from framework.data.loader import build_dataloader
from framework.data.unpaired import UnpairedImageFolders

FLIPS = [{"type": "HorizontalFlip", "p": 0.5}]


@pytest.fixture
def folders(tmp_path):
    """trainA: 3 images, trainB: 5 (a domain longer than the other), 12x16 each."""
    rng = np.random.default_rng(0)
    for domain, count in (("A", 3), ("B", 5)):
        (tmp_path / f"train{domain}").mkdir()
        for i in range(count):
            cv2.imwrite(str(tmp_path / f"train{domain}" / f"{i}.png"), rng.integers(0, 256, (12, 16, 3), np.uint8))
    return tmp_path


def samples(dataset, seeds=(7, 8)):
    return [dataset[(i, seed)] for seed in seeds for i in range(len(dataset))]


def test_each_image_of_both_domains_is_cached_once_and_samples_do_not_change(folders, tmp_path):
    plain = UnpairedImageFolders(root=str(folders), pipeline=FLIPS)
    expected = samples(plain)
    cached = cache_in_memory(UnpairedImageFolders(root=str(folders), pipeline=FLIPS), "memory", 64, "data.train")
    assert cached.decoded_cache.nbytes == (3 + 5) * 12 * 16 * 3  # 5 indices: A[3], A[4] do not exist
    assert cached.load_images(2)[0] is not None and cached.load_images(3)[0] is None  # A's last index, one past
    shutil.rmtree(folders / "trainA")  # read from RAM from now on
    shutil.rmtree(folders / "trainB")
    for got, want in zip(samples(cached), expected, strict=True):
        assert got["name_a"] == want["name_a"] and got["name_b"] == want["name_b"]
        assert torch.equal(got["a"], want["a"]) and torch.equal(got["b"], want["b"])


def test_cache_auto_caches_an_unpaired_dataset_and_says_so(folders, framework_log):
    section = {"dataset": {"type": "UnpairedImageFolders", "root": str(folders)}, "batch_size": 2, "num_workers": 0}
    loader = build_dataloader(section, "data.train", train=True)
    assert loader.dataset.decoded_cache is not None
    assert "data.train: cache: auto: about 0.0 MB decoded fits the budget" in framework_log.text
    next(iter(loader))
    assert len(loader.dataset.decoded_cache.samples) > 0  # kept as the first epoch reads them

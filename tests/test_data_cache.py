"""`cache: memory` and `cache: auto` (decoded samples kept in RAM) and `num_workers: auto`."""

import shutil
import time

import numpy as np
import pytest
import torch

from benchmarks.helpers.folder_data import make_voc
from framework.data.cache import auto_budget_mb, cache_in_memory
from framework.data.loader import auto_workers, build_dataloader
from framework.data.shapes import SyntheticShapes
from framework.errors import ConfigError

CLASSES = ["background", "circle", "rectangle", "triangle"]
FLIPS = [{"type": "HorizontalFlip", "p": 0.5}, {"type": "VerticalFlip", "p": 0.5}]


def section(root, **settings):
    dataset = {"type": "VOCSegmentation", "root": str(root), "classes": CLASSES, "pipeline": FLIPS}
    return {"dataset": dataset, "batch_size": 4, "num_workers": 0, **settings}


def epoch(loader, number=0):
    loader.sampler.set_epoch(number)
    return list(loader)


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return make_voc(tmp_path_factory.mktemp("voc"), count=12, size=32)


def test_cached_loader_gives_the_uncached_batches_without_reading_files(voc, tmp_path):
    plain = build_dataloader(section(voc, cache=None), "data.train", train=True, seed=3)
    assert not hasattr(plain.dataset, "decoded_cache")
    root = shutil.copytree(voc, tmp_path / "voc")
    cached = build_dataloader(section(root, cache="memory"), "data.train", train=True, seed=3)
    assert len(cached.dataset.decoded_cache.samples) == 12
    shutil.rmtree(root)  # every sample must now come from memory
    for number in (0, 1):  # the same order and the same seeded flips, epoch after epoch
        for ours, reference in zip(epoch(cached, number), epoch(plain, number), strict=True):
            assert torch.equal(ours["image"], reference["image"]) and torch.equal(ours["mask"], reference["mask"])
            assert ours["name"] == reference["name"]


def test_cache_limit_caches_a_prefix_and_decodes_the_rest(voc):
    one_sample_mb = (32 * 32 * 3 + 32 * 32) / 2**20  # a decoded image and its uint8 mask
    loader = build_dataloader(section(voc, cache="memory", cache_limit_mb=2.5 * one_sample_mb),
                              "data.train", train=True)
    assert len(loader.dataset.decoded_cache.samples) == 2
    assert len(epoch(loader)) == 3  # the other 10 samples are still read from disk


@pytest.mark.parametrize("samples_in_limit, cached", [(0.5, 0), (2.0, 2), (2.5, 2)])
def test_past_the_cache_limit_every_sample_has_the_uncached_pixels(voc, samples_in_limit, cached):
    """A limit of exactly two samples caches two; each of the 12 samples, cached or decoded per
    access, holds the pixels, mask and name of the uncached loader's, batch by batch too."""
    one_sample_mb = (32 * 32 * 3 + 32 * 32) / 2**20
    plain = build_dataloader(section(voc), "data.train", train=True, seed=3)
    limited = build_dataloader(section(voc, cache="memory", cache_limit_mb=samples_in_limit * one_sample_mb),
                               "data.train", train=True, seed=3)
    assert len(limited.dataset.decoded_cache.samples) == cached
    for index in range(12):
        ours, reference = limited.dataset.load_sample(index), plain.dataset.load_sample(index)
        assert np.array_equal(ours[0], reference[0]) and np.array_equal(ours[1], reference[1]), index
        assert ours[2] == reference[2]
    for ours, reference in zip(epoch(limited, 1), epoch(plain, 1), strict=True):
        assert torch.equal(ours["image"], reference["image"]) and torch.equal(ours["mask"], reference["mask"])
        assert ours["name"] == reference["name"]


def test_cached_arrays_are_read_only(voc):
    loader = build_dataloader(section(voc, cache="memory"), "data.train", train=True)
    image, mask, _ = loader.dataset.load_sample(0)
    with pytest.raises(ValueError, match="read-only"):
        image[0, 0, 0] = 1  # an in-place transform must not corrupt later epochs


@pytest.mark.parametrize("settings, message", [
    ({"cache": "disk"}, r"data.train.cache: must be null, memory or auto, got 'disk'"),
    ({"cache": "memory", "cache_limit_mb": 0}, r"data.train.cache_limit_mb: must be a positive number"),
    ({"num_workers": -1}, r"data.train.num_workers: must be auto or an integer >= 0, got -1"),
])
def test_bad_cache_and_worker_settings_name_the_key(voc, settings, message):
    with pytest.raises(ConfigError, match=message):
        build_dataloader(section(voc, **settings), "data.train", train=True)


def test_auto_workers_leave_small_cpus_to_the_compute():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert auto_workers(cpu, cached=False, cores=2) == 0  # a worker would take a compute core
    assert auto_workers(cpu, cached=True, cores=32) == 0  # only augmentation left to do
    assert auto_workers(cpu, cached=False, cores=16) == 4
    assert auto_workers(cuda, cached=False, cores=2) == 1 and auto_workers(cuda, cached=True, cores=32) == 8


def test_cache_auto_caches_what_fits_during_the_first_epoch_and_says_so(voc, tmp_path, framework_log):
    """Without worker processes the first step does not wait for every sample to be decoded: the
    first epoch decodes them as it reads them (as an uncached one would) and keeps them."""
    root = shutil.copytree(voc, tmp_path / "voc")
    loader = build_dataloader(section(root), "data.train", train=True, seed=3)  # cache: auto, the default
    assert "cache: auto: about 0.0 MB decoded fits the budget" in framework_log.text
    assert "data.train: cache: auto: decoded samples kept as the first epoch reads them" in framework_log.text
    assert loader.dataset.decoded_cache.samples == {}  # nothing decoded before the first step
    reference = build_dataloader(section(voc, cache=None), "data.train", train=True, seed=3)
    first = epoch(loader)
    assert len(loader.dataset.decoded_cache.samples) == 12
    shutil.rmtree(root)  # every sample must now come from memory
    for number, batches in ((0, first), (1, epoch(loader, 1))):
        for ours, theirs in zip(batches, epoch(reference, number), strict=True):
            assert torch.equal(ours["image"], theirs["image"]) and torch.equal(ours["mask"], theirs["mask"])


@pytest.mark.parametrize("settings, filled", [({"num_workers": 1}, True), ({"num_workers": 0}, False),
                                              ({"num_workers": 0, "cache": "memory"}, True)])
def test_the_cache_is_filled_before_workers_fork_or_when_memory_asks(voc, settings, filled):
    """Forked workers share the pages of a cache filled before them; each filling its own would
    hold a copy per worker. `cache: memory` decodes up front, as its documentation says."""
    loader = build_dataloader(section(voc, **settings), "data.train", train=True)
    assert len(loader.dataset.decoded_cache.samples) == (12 if filled else 0)
    assert loader.dataset.decoded_cache.filled_at_start is filled


def test_cache_auto_reads_from_disk_what_does_not_fit(voc, framework_log):
    one_sample_mb = (32 * 32 * 3 + 32 * 32) / 2**20
    loader = build_dataloader(section(voc, cache_limit_mb=5 * one_sample_mb), "data.train", train=True)
    assert not hasattr(loader.dataset, "decoded_cache")  # 12 samples over a budget of 5: none cached
    assert "cache: auto: not cached: about 0 MB decoded, over the budget of 0 MB" in framework_log.text


def test_cache_auto_leaves_datasets_it_cannot_cache_alone(monkeypatch):
    node = {"dataset": {"type": "SyntheticShapes", "num_samples": 8, "size": 32}, "batch_size": 4, "num_workers": 0}
    assert hasattr(build_dataloader(node, "data.train", train=True).dataset, "decoded_cache")
    monkeypatch.setattr(SyntheticShapes, "cacheable", False, raising=False)
    assert not hasattr(build_dataloader(node, "data.train", train=True).dataset, "decoded_cache")


def test_cache_auto_budget_is_a_quarter_of_available_memory_shared_by_processes():
    assert auto_budget_mb(4096, available_mb=8000, processes=2) == 1000
    assert auto_budget_mb(500, available_mb=8000, processes=1) == 500  # cache_limit_mb caps it
def test_the_log_says_how_much_was_cached_and_when_the_limit_stopped_it(tmp_path, framework_log):
    voc = make_voc(tmp_path / "voc", count=4, size=128)
    one_sample = 128 * 128 * 3 + 128 * 128
    start = time.perf_counter()
    loader = build_dataloader(section(voc, cache="memory"), "data.train", train=True)
    elapsed = time.perf_counter() - start
    build_dataloader(section(voc, cache="memory", cache_limit_mb=2.5 * one_sample / 2**20), "data.val",
                     train=False)
    lines = [r.getMessage() for r in framework_log.records if "decoded samples" in r.getMessage()]
    assert lines[0].startswith(f"data.train: cached 4 of 4 decoded samples, {4 * one_sample / 2**20:.1f} MB in ")
    assert lines[0].endswith("s")  # no note: everything fits
    assert lines[1].startswith(f"data.val: cached 2 of 4 decoded samples, {2 * one_sample / 2**20:.1f} MB in ")
    assert lines[1].endswith(f" (cache_limit_mb {2.5 * one_sample / 2**20} reached: the rest are decoded per step)")
    assert 0 <= loader.dataset.decoded_cache.seconds <= elapsed


class NoLoaderMethod(torch.utils.data.Dataset):
    """A user's dataset with only __getitem__: nothing the cache can stand in for."""

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return {"image": torch.zeros(3, 4, 4)}


class ImagesOnly(NoLoaderMethod):
    """Only `load_image` (the base of unlabelled image folders), no load_sample/load_pair."""

    def load_image(self, index):
        return np.full((4, 4, 3), index, np.uint8), f"{index}.png"


def test_the_cache_needs_a_loader_method_and_finds_load_image():
    with pytest.raises(ConfigError) as raised:
        cache_in_memory(NoLoaderMethod(), "memory", 10, "data.train")
    assert str(raised.value) == ("cache: memory needs a dataset with one of load_sample, load_pair, load_image, "
                                 "load_images(index) (the bases in framework/data); NoLoaderMethod has none")
    dataset = cache_in_memory(ImagesOnly(), "memory", 10, "data.train")
    assert dataset.decoded_cache.method == "load_image" and len(dataset.decoded_cache.samples) == 2
    assert dataset.load_image(1)[0][0, 0, 0] == 1 and dataset.load_image(1)[1] == "1.png"


@pytest.mark.parametrize("limit", [True, "10", 0, -1.0])
def test_cache_limit_must_be_a_positive_number(limit):
    with pytest.raises(ConfigError) as raised:
        cache_in_memory(ImagesOnly(), "memory", limit, "data.train")
    assert str(raised.value) == f"data.train.cache_limit_mb: must be a positive number, got {limit!r}"

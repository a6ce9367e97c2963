"""`weight: auto`: class weights from the training masks, in the losses, cached, on every rank."""

import json
import math
import multiprocessing

import inference_probes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from framework.analysis.class_weights import CACHE_NAME, class_pixel_counts, compute_weights
from framework.data.shapes import SyntheticShapes
from framework.losses.cross_entropy import CrossEntropyLoss
from framework.losses.segmentation import BCEWithLogitsLoss, DiceLoss
from support import REPO, call_tool, free_port

PIXELS = np.array([100, 10, 0, 30])
IMAGE_PIXELS = np.array([200, 50, 0, 100])  # pixels of the images in which each class appears


def test_median_frequency_and_inverse_log_weights_by_hand():
    # frequencies 0.5, 0.2, 0.3 (class 2 absent): median 0.3
    assert compute_weights(PIXELS, IMAGE_PIXELS, "median_frequency").tolist() == pytest.approx([0.6, 1.5, 0.0, 1.0])
    expected = [1 / math.log(1.02 + p / 140) for p in (100, 10)] + [0.0, 1 / math.log(1.02 + 30 / 140)]
    assert compute_weights(PIXELS, IMAGE_PIXELS, "inverse_log").tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="weight_method"):
        CrossEntropyLoss(weight="auto", weight_method="median")


def test_auto_weighted_losses_use_the_weights_they_are_given():
    torch.manual_seed(0)
    logits, target = torch.randn(2, 4, 8, 8), torch.randint(0, 4, (2, 8, 8))
    weights = torch.tensor([0.5, 2.0, 1.0, 3.0])
    ce = CrossEntropyLoss(weight="auto")
    with pytest.raises(RuntimeError, match="has not been computed"):
        ce(logits, target)  # never silently unweighted
    ce.set_class_weights(weights)
    torch.testing.assert_close(ce(logits, target), F.cross_entropy(logits, target, weight=weights))
    dice, plain = DiceLoss(class_weight="auto"), DiceLoss(class_weight=[1.0, 1.0, 1.0, 1.0])
    dice.set_class_weights(weights)
    assert not torch.isclose(dice(logits, target), plain(logits, target))
    torch.testing.assert_close(plain(logits, target), DiceLoss()(logits, target))
    bce = BCEWithLogitsLoss(pos_weight="auto")
    bce.set_class_weights(torch.tensor([0.5, 2.0]))
    assert bce.pos_weight.item() == 4.0


def test_counts_come_from_the_raw_masks_and_are_cached(tmp_path):
    dataset = SyntheticShapes(num_samples=5, size=32, pipeline=[{"type": "HorizontalFlip", "p": 1.0}])
    masks = [dataset.load_sample(i)[1] for i in range(5)]
    pixels, image_pixels = class_pixel_counts(dataset, str(tmp_path), {"type": "SyntheticShapes"})
    assert pixels.tolist() == np.bincount(np.concatenate([m.ravel() for m in masks]), minlength=4).tolist()
    assert image_pixels[0] == 5 * 32 * 32
    cache = json.loads((tmp_path / CACHE_NAME).read_text())
    assert cache["pixels"] == pixels.tolist() and cache["image_pixels"] == image_pixels.tolist()
    cache["pixels"] = [1, 1, 1, 1]  # a cached count is read back, not recounted
    (tmp_path / CACHE_NAME).write_text(json.dumps(cache))
    assert class_pixel_counts(dataset, str(tmp_path), {"type": "SyntheticShapes"})[0].tolist() == [1, 1, 1, 1]
    # Another dataset config does not match the cache: counted again.
    assert class_pixel_counts(dataset, str(tmp_path), {"type": "other"})[0].tolist() == pixels.tolist()


def test_training_with_weight_auto_logs_and_caches_the_weights(tmp_path):
    work_dir = tmp_path / "run"
    loss = "task.loss={type: CombinedLoss, losses: [{type: CrossEntropyLoss, weight: auto}, " \
           "{type: DiceLoss, class_weight: auto, weight_method: inverse_log}]}"
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", work_dir,
                       loss, "device=cpu", "train.max_iters=1", "train.val_interval=0", "task.model.depth=1",
                       "task.model.base_channels=4", "data.train.dataset.num_samples=8", "data.train.batch_size=4",
                       "data.train.num_workers=0", "data.train.dataset.size=32")
    assert result.returncode == 0, result.stderr
    cache = json.loads((work_dir / CACHE_NAME).read_text())
    expected = compute_weights(np.array(cache["pixels"]), np.array(cache["image_pixels"]), "median_frequency")
    log = (work_dir / "train.log").read_text()
    shown = ", ".join(f"{n} {w:.3f}" for n, w in zip(["background", "circle", "rectangle", "triangle"], expected))
    assert f"CrossEntropyLoss class weights (median_frequency): {shown}" in log
    assert "DiceLoss class weights (inverse_log)" in log


def test_every_rank_trains_with_rank_0_weights(tmp_path):
    port, context = free_port(), multiprocessing.get_context("fork")
    outputs = [tmp_path / f"rank{r}.json" for r in range(2)]
    processes = [context.Process(target=inference_probes.auto_weights_on_rank, args=(r, port, str(tmp_path), str(o)))
                 for r, o in enumerate(outputs)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0, 0]
    rank0, rank1 = (json.loads(o.read_text()) for o in outputs)
    assert rank0 == rank1
    pixels, image_pixels = class_pixel_counts(SyntheticShapes(num_samples=6, size=32, seed=0), None)
    assert rank0 == pytest.approx(compute_weights(pixels, image_pixels, "inverse_log").tolist())
    own = class_pixel_counts(SyntheticShapes(num_samples=6, size=32, seed=1), None)
    assert rank1 != pytest.approx(compute_weights(*own, "inverse_log").tolist())  # not its own data's


def test_a_one_pixel_class_is_weighed_and_an_unknown_method_named():
    pixels, image_pixels = np.array([1000, 1, 0]), np.array([1000, 500, 0])
    for method in ("median_frequency", "inverse_log"):
        weights = compute_weights(pixels, image_pixels, method)
        assert weights.dtype == np.float64 and weights[1] > weights[0] > 0 and weights[2] == 0, method
    with pytest.raises(ValueError, match=r"^weight_method: one of \('median_frequency', 'inverse_log'\), got 'mean'$"):
        compute_weights(pixels, image_pixels, "mean")


def test_the_cache_goes_where_asked_holds_every_methods_weights_and_is_optional(tmp_path, monkeypatch):
    dataset = SyntheticShapes(num_samples=3, size=32)
    work_dir = tmp_path / "not" / "yet"  # made when the cache is written
    pixels, image_pixels = class_pixel_counts(dataset, str(work_dir), {"type": "SyntheticShapes"})
    cache = json.loads((work_dir / CACHE_NAME).read_text())
    assert sorted(p.name for p in work_dir.iterdir()) == [CACHE_NAME]  # no temporary file left
    assert cache["weights"] == {m: compute_weights(pixels, image_pixels, m).tolist()
                                for m in ("median_frequency", "inverse_log")}
    monkeypatch.chdir(tmp_path / "not")
    uncached, _ = class_pixel_counts(dataset, None)  # no work dir (tools, notebooks): counted, not cached
    assert uncached.tolist() == pixels.tolist() and sorted(p.name for p in (tmp_path / "not").iterdir()) == ["yet"]

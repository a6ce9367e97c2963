"""Mixed sizes anywhere in a split (nothing-silent part 4, item 6): the start-up check compares
two samples, so a split whose fifth image is larger got past it and ended in torch's collate
traceback at the iteration (or the evaluation) that batched it. Now that batch is one `error:`
line naming two of its samples and their sizes, exit status 2, in the main process or from a
loader worker; one size throughout, or batches of one, train."""

import numpy as np
import pytest
import torch
from conftest import SEGMENTATION_CONFIG, TINY_UNET_RUN
from PIL import Image

from framework.data.collate import SizeCheckedCollate, size_mismatch
from framework.errors import DataError
from support import call_tool

CLASSES = "[background, circle, rectangle, triangle]"


def write_folder(root, count: int = 6, larger: int | None = 4):
    """`count` 32x32 images and masks; image and mask `larger` are 40x48."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(count):
        shape = (40, 48) if i == larger else (32, 32)
        Image.fromarray(np.full((*shape, 3), 20 * i, np.uint8)).save(root / "images" / f"{i:02d}.png")
        Image.fromarray(np.full(shape, i % 4, np.uint8)).save(root / "masks" / f"{i:02d}.png")
    return root


def run(tmp_path, split: str, *overrides):
    node = f"{{type: ImageMaskFolder, root: {write_folder(tmp_path / 'data')}, classes: {CLASSES}}}"
    return call_tool("train", "--config", SEGMENTATION_CONFIG, "--work-dir", tmp_path / "run", *TINY_UNET_RUN,
                     f"data.{split}.dataset={node}", "data.train.batch_size=2", "data.val.batch_size=2",
                     "train.max_iters=3", "train.val_interval=3", "train.ckpt_interval=3", *overrides)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_larger_fifth_training_image_is_named_when_its_batch_is_made(tmp_path, workers):
    result = run(tmp_path, "train", f"data.train.num_workers={workers}")  # 3 iterations: every sample once
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: data.train: samples of different sizes in one batch (image: "), result.stderr
    assert "04 is 40x48" in line and "is 32x32" in line and "data.train.dataset.pipeline" in line
    assert "Traceback" not in result.stderr and "stack expects" not in result.stderr


def test_a_mixed_validation_split_is_named_at_its_evaluation(tmp_path):
    result = run(tmp_path, "val")
    assert result.returncode == 2, result.stderr
    assert "error: evaluation at iteration 3 failed: data.val: samples of different sizes in one batch (image: " \
        in result.stderr
    assert "04 is 40x48" in result.stderr


def test_batches_of_one_sample_train_on_mixed_sizes(tmp_path):
    result = run(tmp_path, "val", "data.val.batch_size=1")
    assert result.returncode == 0, result.stderr


def test_unpaired_samples_are_named_by_their_side():
    samples = [{"a": torch.zeros(3, 8, 8), "b": torch.zeros(3, 8, 8), "name_a": "horse1", "name_b": "zebra1"},
               {"a": torch.zeros(3, 8, 8), "b": torch.zeros(3, 9, 8), "name_a": "horse2", "name_b": "zebra2"}]
    assert size_mismatch(samples, "data.train") == (
        "data.train: samples of different sizes in one batch (b: zebra1 is 8x8, zebra2 is 9x8), which no batch can "
        "hold: images of mixed sizes; add a Resize (or a crop) to data.train.dataset.pipeline, or give the files one "
        "size")
    with pytest.raises(DataError, match="zebra2 is 9x8"):
        SizeCheckedCollate("data.train")(samples)
    samples[1]["b"] = torch.ones(3, 8, 8)
    assert torch.equal(SizeCheckedCollate("data.train")(samples)["b"][1], torch.ones(3, 8, 8))
    with pytest.raises(TypeError):  # another collate failure is torch's own
        SizeCheckedCollate("data.train")([{"a": torch.zeros(2)}, {"a": "text"}])

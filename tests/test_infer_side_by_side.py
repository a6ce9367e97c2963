"""tools/infer.py on pix2pix's facades, whose files are the photo and its label rendering side by
side (A | B): a file of the dataset's folders (the published test split too, which no data section
of the config reads) is translated from the half training reads (B with direction: BtoA), as
training and tools/test.py split the pairs, not as one 2W-wide image."""

import numpy as np
import pytest
import torch
from PIL import Image

from framework.api.model import Model
from framework.config import load_config, to_plain
from framework.engine.trained import load_trained_task
from published_fixtures import published_overrides
from support import REPO, call_tool, train_run

FACADES = REPO / "projects/pix2pix/configs/pix2pix_facades.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("facades")
    overrides = [*published_overrides(to_plain(load_config(str(FACADES))), tmp, samples=2), "device=cpu",
                 "train.max_iters=1", "train.val_interval=1", "train.ckpt_interval=1", "loggers=[]",
                 "data.train.num_workers=0", "data.val.num_workers=0"]
    work_dir = train_run(tmp / "run", FACADES, *overrides)
    return work_dir, overrides, tmp / "fixture"


def test_a_file_of_the_published_test_split_is_translated_from_its_label_half(run, tmp_path):
    work_dir, overrides, root = run
    pair = root / "test" / "1.jpg"
    side_by_side = np.asarray(Image.open(pair).convert("RGB"))
    assert side_by_side.shape[:2] == (32, 64)
    done = call_tool("infer", "--config", FACADES, "--checkpoint", work_dir / "checkpoints/iter_1.pth",
                     "--input", root / "test", "--output", tmp_path / "out", "--device", "cpu", *overrides)
    assert done.returncode == 0, done.stderr
    written = np.asarray(Image.open(tmp_path / "out/1.png"))
    assert written.shape[:2] == (32, 32)  # the half, not the whole 2W-wide file
    task, plain = load_trained_task(str(FACADES), str(work_dir / "checkpoints/iter_1.pth"), overrides,
                                    torch.device("cpu"))
    expected = Model(task, plain, torch.device("cpu")).translate(
        np.ascontiguousarray(side_by_side[:, 32:]))  # BtoA: the right half, the label rendering
    np.testing.assert_array_equal(written, expected)


def test_an_odd_width_pair_is_named_and_a_file_elsewhere_is_read_whole(run, tmp_path):
    work_dir, overrides, root = run
    odd = root / "odd"
    odd.mkdir(exist_ok=True)
    Image.fromarray(np.zeros((32, 63, 3), np.uint8)).save(odd / "1.png")
    done = call_tool("infer", "--config", FACADES, "--checkpoint", work_dir / "checkpoints/iter_1.pth",
                     "--input", odd, "--output", tmp_path / "out", "--device", "cpu", *overrides)
    assert done.returncode != 0 and "width 63 is odd" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    single = tmp_path / "single"
    single.mkdir()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(single / "photo.png")
    done = call_tool("infer", "--config", FACADES, "--checkpoint", work_dir / "checkpoints/iter_1.pth",
                     "--input", single, "--output", tmp_path / "out2", "--device", "cpu", *overrides)
    assert done.returncode == 0, done.stderr
    assert np.asarray(Image.open(tmp_path / "out2/photo.png")).shape[:2] == (32, 32)

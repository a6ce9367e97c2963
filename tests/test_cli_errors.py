"""User mistakes end in one clear line on stderr naming the culprit, exit status 2, no traceback."""

import textwrap

import cv2
import numpy as np
import pytest

from support import REPO, TINY_SEGMENTATION, run_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"


def assert_one_clear_line(result, *needles):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def write_config(tmp_path, body: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"_base_: [{CONFIG}]\n" + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("overrides, needles", [
    (["task.model.type=UNett"], ["task.model.type", "UNett", "'UNet'"]),
    (["+task.model.widht=3"], ["task.model.widht", "UNet", "accepts:"]),
    (["optim.lrr=0.1"], ["optim.lrr", "did you mean 'lr'"]),
])
def test_bad_overrides(tmp_path, overrides, needles):
    result = run_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *TINY_SEGMENTATION, *overrides)
    assert_one_clear_line(result, *needles)


def test_unknown_top_level_key(tmp_path):
    result = run_tool("train", "--config", write_config(tmp_path, "optimizer: {type: SGD}\n"))
    assert_one_clear_line(result, "unknown top-level key 'optimizer'", "did you mean")


def test_missing_config_file(tmp_path):
    result = run_tool("train", "--config", tmp_path / "nope.yaml")
    assert_one_clear_line(result, "config file not found", "nope.yaml")


def test_missing_data_folder(tmp_path):
    config = write_config(tmp_path, f"""
        data:
          train:
            dataset: {{type: VOCSegmentation, root: {tmp_path / 'VOCnope'}}}
        """)
    result = run_tool("train", "--config", config, "--work-dir", tmp_path, *TINY_SEGMENTATION[:4])
    assert_one_clear_line(result, "data.train.dataset", "VOCnope")


def test_mask_values_out_of_range_name_file_and_values(tmp_path):
    root = tmp_path / "folder"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        cv2.imwrite(str(root / "images" / f"{i:02d}.png"), rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
        mask = np.zeros((64, 64), np.uint8)
        if i == 5:
            mask[:4, :4] = 7
            mask[10, 10] = 9
        cv2.imwrite(str(root / "masks" / f"{i:02d}.png"), mask)
    config = write_config(tmp_path, f"""
        data:
          train:
            dataset: {{type: ImageMaskFolder, root: {root}, classes: [a, b, c, d]}}
            shuffle: false
        """)
    result = run_tool("train", "--config", config, "--work-dir", tmp_path / "wd", "train.max_iters=4",
                      "data.train.batch_size=2", "data.train.num_workers=1", "train.val_interval=0")
    assert_one_clear_line(result, "05.png", "7", "9")

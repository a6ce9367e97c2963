"""tools/check_dataset.py on image folders with planted faults, and on a clean one."""

import json

import cv2
import numpy as np
from PIL import Image

from framework.data.folder import read_index_mask
from support import REPO, call_tool, run_tool

CLASSES = ["background", "circle", "rectangle", "triangle"]


def make_folder(root, faults=False):
    """Six 24x32 samples; sample i has class i % 4 in its top rows and an ignored corner."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        cv2.imwrite(str(root / "images" / f"s{i}.png"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
        mask = np.zeros((24, 32), np.uint8)
        mask[:8] = i % 4
        mask[20:, :4] = 255
        Image.fromarray(mask).save(root / "masks" / f"s{i}.png")
    if faults:
        (root / "images" / "s1.png").write_bytes(b"not an image")
        mask = np.zeros((24, 32), np.uint8)
        mask[0, 0] = 7
        Image.fromarray(mask).save(root / "masks" / "s2.png")
        colours = np.zeros((24, 32, 3), np.uint8)
        colours[:5] = (128, 0, 0)  # the palette's colour of class 1
        Image.fromarray(colours).save(root / "masks" / "s3.png")
        Image.fromarray(np.zeros((20, 32), np.uint8)).save(root / "masks" / "s4.png")
    config = root / "config.yaml"
    config.write_text(f"_base_: {REPO}/configs/segmentation/unet_shapes.yaml\n"
                      f"data:\n  train:\n    dataset: {{type: ImageMaskFolder, root: {root}, classes: {CLASSES}}}\n")
    return config


def test_names_every_planted_fault_and_exits_non_zero(tmp_path):
    config = make_folder(tmp_path / "data", faults=True)
    result = run_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json",
                      "--convert-rgb-masks", tmp_path / "converted")  # a real process: its exit status
    assert result.returncode == 1
    root = tmp_path / "data"
    lines = result.stdout.splitlines()
    expected = [f"{root}/images/s1.png: cannot read image (missing, corrupt or not an image)", f"{root}/masks/s2.png: mask values [7] outside [0, 4)",
                f"{root}/masks/s3.png: RGB colour mask", f"{root}/masks/s4.png: mask is 20x32 but its image is 24x32"]
    for start in expected:
        assert any(line.startswith(start) for line in lines), start
    assert "(0, 0, 0)=background, (128, 0, 0)=circle" in result.stdout and "--convert-rgb-masks" in result.stdout
    assert "4 problem(s)" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["samples"] == 6 and len([p for p in report["problems"] if not p.startswith("  ")]) == 4
    converted = read_index_mask(str(tmp_path / "converted" / "s3.png"))  # loads as a class-index mask
    assert converted.shape == (24, 32) and (converted[:5] == 1).all() and (converted[5:] == 0).all()


def test_duplicate_names_and_all_ignored_masks_are_listed_with_the_other_problems(tmp_path):
    config = make_folder(tmp_path / "data", faults=True)
    root = tmp_path / "data"
    cv2.imwrite(str(root / "images" / "s0.jpg"), np.zeros((24, 32, 3), np.uint8))  # s0.png and s0.jpg
    Image.fromarray(np.full((24, 32), 255, np.uint8)).save(root / "masks" / "s5.png")
    result = call_tool("check_dataset", "--config", config)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    duplicate = [line for line in lines if " are named s0; keep one" in line]
    assert len(duplicate) == 1 and duplicate[0].startswith(f"{root / 'images'}: both s0.")
    assert f"{root}/masks/s5.png: every pixel is ignore_index 255" in result.stdout
    assert f"{root}/masks/s2.png: mask values [7] outside [0, 4)" in result.stdout  # the others still listed
    assert "6 problem(s)" in result.stdout


def test_check_dataset_refuses_a_negative_worker_count(tmp_path):
    result = call_tool("check_dataset", "--config", make_folder(tmp_path / "data"), "--workers", "-1")
    assert result.returncode == 2 and result.stderr == "error: --workers: expected an integer >= 0, got -1\n"


def test_a_clean_folder_exits_zero_with_the_class_table(tmp_path):
    config = make_folder(tmp_path / "data")
    result = call_tool("check_dataset", "--config", config, "--json", tmp_path / "report.json")
    assert result.returncode == 0, result.stderr
    assert "no problems found" in result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.split()[:1] and line.split()[0] in CLASSES}
    # Per sample 8 x 32 = 256 pixels of class i % 4, the other rows background but a 4 x 4 ignored corner.
    background = 6 * (24 * 32 - 16) - 4 * 256
    assert [int(rows[c][1]) for c in CLASSES] == [background, 2 * 256, 256, 256]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["images"] for r in report["classes"]] == [6, 2, 1, 1]
    assert report["sizes"]["distinct_sizes"] == 1 and report["sizes"]["max_height"] == 24


def test_a_missing_split_is_one_line(tmp_path):
    config = make_folder(tmp_path / "data")
    result = call_tool("check_dataset", "--config", config, "--split", "test")
    assert result.returncode == 2 and result.stderr.startswith("error: data.test")

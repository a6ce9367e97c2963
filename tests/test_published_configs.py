"""tools/check_dataset.py, tools/browse_dataset.py and tools/make_fixture_dataset.py on each
published layout (counts against the published ones, the class histogram by name, the ignored
fraction), including pix2pix's facades and CycleGAN's horse2zebra layouts. The recipes' two
iterations on fixture trees are in tests/test_shipped_features_published.py (shrunk for a CPU:
tests/published_fixtures.py; at the recipes' own sizes: tests/scripts/recipe_smoke.py)."""

import json

import numpy as np
import pytest
from PIL import Image

from framework.config import load_config, to_plain
from framework.data.published.fixture_trees import write_fixture_tree
from published_fixtures import published_overrides
from support import REPO, call_tool

CITYSCAPES_SEGMENTATION = REPO / "configs/segmentation/deeplabv3plus_r50_cityscapes.yaml"
TRAIN_LABEL_IDS = {7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33}


def fixture_overrides(config, tmp_path) -> list[str]:
    return published_overrides(to_plain(load_config(str(config))), tmp_path)


def test_make_fixture_dataset_writes_the_published_names(tmp_path):
    result = call_tool("make_fixture_dataset", "--layout", "cityscapes", tmp_path / "cs", "--samples", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == str(tmp_path / "cs")
    gt = sorted(p.name for p in (tmp_path / "cs/gtFine/val/frankfurt").iterdir())
    assert gt[:4] == ["frankfurt_000000_000019_gtFine_color.png", "frankfurt_000000_000019_gtFine_instanceIds.png",
                      "frankfurt_000000_000019_gtFine_labelIds.png", "frankfurt_000001_000020_gtFine_color.png"]
    instances = Image.open(tmp_path / "cs/gtFine/val/frankfurt/frankfurt_000000_000019_gtFine_instanceIds.png")
    assert np.asarray(instances).max() >= 24000  # 16-bit: labelId * 1000 + instance
    result = call_tool("make_fixture_dataset", "--layout", "ade20k", tmp_path / "ade", "--samples", "0")
    assert result.returncode == 2 and "--samples" in result.stderr and "got 0" in result.stderr


def test_make_fixture_dataset_writes_facades_and_horse2zebra_as_published(tmp_path):
    result = call_tool("make_fixture_dataset", "--layout", "facades", tmp_path / "facades", "--samples", "2")
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == str(tmp_path / "facades")
    assert sorted(p.relative_to(tmp_path / "facades").as_posix() for p in (tmp_path / "facades").rglob("*.jpg")) == [
        "test/1.jpg", "test/2.jpg", "train/1.jpg", "train/2.jpg", "val/1.jpg", "val/2.jpg"]
    assert Image.open(tmp_path / "facades/train/1.jpg").size == (64, 32)  # A | B side by side
    result = call_tool("make_fixture_dataset", "--layout", "horse2zebra", tmp_path / "h2z", "--samples", "2")
    assert result.returncode == 0, result.stderr
    counts = {folder.name: len(list(folder.glob("*.jpg"))) for folder in (tmp_path / "h2z").iterdir() if folder.is_dir()}
    assert counts == {"trainA": 2, "trainB": 3, "testA": 2, "testB": 3}
    assert sorted(p.name for p in (tmp_path / "h2z/trainA").iterdir()) == ["n02381460_1.jpg", "n02381460_11.jpg"]


def test_check_dataset_on_cityscapes_counts_names_and_ignored_fraction(tmp_path):
    overrides = fixture_overrides(CITYSCAPES_SEGMENTATION, tmp_path)
    report = tmp_path / "report.json"
    result = call_tool("check_dataset", "--config", CITYSCAPES_SEGMENTATION, "--json", report, *overrides)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "warning: 3 samples, Cityscapes train has 2975 as published" in result.stdout
    assert "no problems found" in result.stdout
    written = json.loads(report.read_text())
    assert [row["class"] for row in written["classes"]][:3] == ["road", "sidewalk", "building"]
    assert written["published_count"] == 2975
    label_ids = np.concatenate([np.asarray(Image.open(p)).ravel() for p in
                                sorted((tmp_path / "fixture/gtFine/train").rglob("*_labelIds.png"))])
    ignored = np.mean(~np.isin(label_ids, list(TRAIN_LABEL_IDS)))
    assert written["ignored_fraction"] == pytest.approx(ignored)
    assert f"ignored pixels (ignore_index 255): {ignored:.2%}" in result.stdout


@pytest.mark.parametrize("layout, dataset, classes, first", [
    ("ade20k", "{type: ADE20K, root: ROOT, split: validation}", 150, "wall"),
    ("cocostuff", "{type: COCOStuff, root: ROOT, split: val}", 171, "person"),
])
def test_check_and_browse_dataset_on_ade20k_and_cocostuff(tmp_path, layout, dataset, classes, first):
    root = write_fixture_tree(layout, tmp_path / layout)
    config = tmp_path / "config.yaml"
    config.write_text(f"""
task: {{type: SegmentationTask, num_classes: {classes}, model: {{type: UNet, num_classes: {classes}, base_channels: 8, depth: 2}}}}
data:
  train: {{dataset: {dataset.replace("ROOT", str(root))}, batch_size: 2}}
optim: {{type: AdamW, lr: 1.0e-3}}
train: {{max_iters: 2}}
""")
    report = tmp_path / "report.json"
    result = call_tool("check_dataset", "--config", config, "--json", report)
    assert result.returncode == 0, result.stderr + result.stdout
    written = json.loads(report.read_text())
    assert written["samples"] == 3 and len(written["classes"]) == classes and written["classes"][0]["class"] == first
    assert "as published" in result.stdout and written["ignored_fraction"] > 0
    browsed = call_tool("browse_dataset", "--config", config, "--output", tmp_path / "browse", "--num", "2")
    assert browsed.returncode == 0, browsed.stderr
    assert (tmp_path / "browse" / "grid_000.png").is_file()


def test_check_dataset_names_a_bad_label_file_of_a_published_tree(tmp_path):
    overrides = fixture_overrides(CITYSCAPES_SEGMENTATION, tmp_path)
    bad = sorted((tmp_path / "fixture/gtFine/train").rglob("*_labelIds.png"))[1]
    labels = np.asarray(Image.open(bad)).copy()
    labels[0, 0] = 77
    Image.fromarray(labels).save(bad)
    result = call_tool("check_dataset", "--config", CITYSCAPES_SEGMENTATION, *overrides)
    assert result.returncode == 1
    assert f"{bad}: label value(s) [77] outside the labelIds 0..33 of Cityscapes" in result.stdout


def test_browse_dataset_shows_a_tree_smaller_than_a_training_batch(tmp_path):
    """browse_dataset was refused by training's rule (fewer samples than batch_size) on a one-sample tree."""
    root = write_fixture_tree("cityscapes", tmp_path / "cs", samples=1)
    overrides = [f"data.train.dataset.root={root}", "data.train.batch_size=2", "data.train.num_workers=0",
                 "data.train.dataset.pipeline=[{type: Resize, height: 32, width: 64}]"]
    browsed = call_tool("browse_dataset", "--config", CITYSCAPES_SEGMENTATION, "--output", tmp_path / "browse",
                        "--num", "4", *overrides)
    assert browsed.returncode == 0, browsed.stderr
    grid = np.asarray(Image.open(tmp_path / "browse/grid_000.png"))
    assert "1 samples" in browsed.stdout and grid.shape[:2] == (32, 3 * 64)  # one row: image | mask | overlay


@pytest.mark.parametrize("layout", ["cityscapes", "ade20k", "voc_sbd", "facades", "horse2zebra", "cocostuff"])
def test_make_fixture_dataset_prints_overrides_a_shipped_config_reads(tmp_path, layout):
    """It printed a key no config has (data_root), and the voc_sbd folder as the root VOC's config reads."""
    result = call_tool("make_fixture_dataset", "--layout", layout, tmp_path / layout, "--samples", "2")
    assert result.returncode == 0, result.stderr
    assert "data_root" not in result.stdout
    command = next((line.split() for line in result.stdout.splitlines() if "tools/train.py" in line), None)
    if layout == "cocostuff":  # no shipped config reads it: the override to set in one's own
        assert command is None and f"data.train.dataset.root={tmp_path / layout}" in result.stdout
        return
    config, overrides = command[command.index("--config") + 1], command[command.index("--config") + 2:]
    checked = call_tool("check_dataset", "--config", REPO / config, *[o for o in overrides if o.startswith("data.")])
    assert checked.returncode == 0, checked.stderr + checked.stdout

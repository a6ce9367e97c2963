"""tools/browse_dataset.py, tools/analyze_model.py and tools/print_config.py, read back."""

import json

import cv2
import numpy as np
import torch
import yaml

from framework.config import load_config, to_plain
from framework.data.loader import build_dataloader
from framework.engine.trained import load_trained_task
from framework.visualization.palette import colorize
from support import REPO, call_tool


def test_browse_dataset_shows_what_the_training_loader_yields(unet_run, tmp_path):
    result = call_tool("browse_dataset", "--config", unet_run.config, "--output", tmp_path, "--num", "6", "--rows", "4")
    assert result.returncode == 0, result.stderr
    grids = [cv2.cvtColor(cv2.imread(str(tmp_path / f"grid_00{i}.png")), cv2.COLOR_BGR2RGB) for i in (0, 1)]
    assert [g.shape for g in grids] == [(4 * 32, 3 * 32, 3), (2 * 32, 3 * 32, 3)]  # image | mask | overlay
    # The first sample of the training loader (its order and augmentation), image and mask.
    plain = to_plain(load_config(unet_run.config))
    loader = build_dataloader(plain["data"]["train"], "data.train", train=True, seed=plain["seed"])
    batch = next(iter(loader))
    palette = torch.tensor(np.array(loader.dataset.palette), dtype=torch.uint8)
    assert np.array_equal(grids[0][:32, :32], batch["image"][0].permute(1, 2, 0).numpy())
    expected_mask = colorize(batch["mask"][0], palette, 255).permute(1, 2, 0).numpy()
    assert np.array_equal(grids[0][:32, 32:64], expected_mask)



def test_browse_dataset_shows_both_unpaired_domains_of_a_cyclegan_sample(tmp_path):
    config = REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml"
    overrides = ["data.train.dataset.num_samples=6", "data.train.dataset.size=32", "data.train.num_workers=0"]
    result = call_tool("browse_dataset", "--config", config, "--output", tmp_path, "--num", "3", *overrides)
    assert result.returncode == 0, result.stderr  # was KeyError 'image'
    grid = cv2.cvtColor(cv2.imread(str(tmp_path / "grid_000.png")), cv2.COLOR_BGR2RGB)
    assert grid.shape == (3 * 32, 2 * 32, 3)  # a row per sample: A | B
    plain = to_plain(load_config(str(config), overrides))
    loader = build_dataloader(plain["data"]["train"], "data.train", train=True, seed=plain["seed"])
    batch = next(iter(loader))
    assert np.array_equal(grid[:32, :32], batch["a"][0].permute(1, 2, 0).numpy())
    assert np.array_equal(grid[:32, 32:], batch["b"][0].permute(1, 2, 0).numpy())

def test_analyze_model_counts_parameters_and_flops(unet_run, tmp_path):
    out = tmp_path / "model.json"
    result = call_tool("analyze_model", *unet_run.args(), "--size", "30", "30", "--depth", "1", "--json", out)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())["model"]
    assert report["input"] == [1, 3, 32, 32]  # rounded up to the UNet's multiple of 4
    rows = {r["module"]: r for r in report["modules"]}
    task, _ = load_trained_task(unet_run.config, None)
    assert rows["UNet"]["params"] == sum(p.numel() for p in task.model.parameters())
    head = task.model.head  # a 1x1 conv: 2 FLOPs per multiply-add, per output pixel
    assert rows["head"]["flops"] == 2 * head.in_channels * head.out_channels * 32 * 32
    assert rows["UNet"]["flops"] == sum(rows[m]["flops"] for m in ("stem", "down", "up", "head"))
    assert "UNet" in result.stdout and "FLOPs" in result.stdout


def test_print_config_merges_bases_and_applies_overrides(tmp_path):
    out = tmp_path / "resolved.yaml"
    result = call_tool("print_config", "--config", REPO / "configs/segmentation/unet_shapes.yaml",
                       "--output", out, "optim.lr=0.5")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed == yaml.safe_load(out.read_text())
    assert printed["optim"]["lr"] == 0.5 and printed["optim"]["type"] == "AdamW"  # from the schedule base
    assert printed["task"]["model"]["num_classes"] == 4  # ${task.num_classes} resolved
    assert printed["train"]["best_metric"] == "mIoU"

"""The Quickstart path end to end through the real command-line tools, at a tiny size."""

import json

import cv2
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from support import REPO, TINY_SEGMENTATION, run_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("run")
    result = run_tool("train", "--config", CONFIG, "--work-dir", work_dir, *TINY_SEGMENTATION)
    assert result.returncode == 0, result.stderr
    return work_dir, result


def read_metrics(work_dir):
    return [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]


def test_training_writes_config_metrics_and_checkpoints(trained):
    work_dir, result = trained
    assert "iter 20/20" in result.stdout and "val iter 20: mIoU" in result.stdout
    records = read_metrics(work_dir)
    assert [r["iter"] for r in records] == [10, 20]
    assert all(0.0 <= r["mIoU"] <= 1.0 and "IoU.circle" in r for r in records)
    assert (work_dir / "config.yaml").read_text().count("max_iters: 20") == 1
    checkpoints = work_dir / "checkpoints"
    assert (checkpoints / "latest").read_text() == "iter_20.pth"
    assert {p.name for p in checkpoints.iterdir()} >= {"iter_10.pth", "iter_20.pth", "best.pth", "latest"}
    assert not [p for p in checkpoints.iterdir() if "tmp" in p.name]


def test_tensorboard_has_train_loss_lr_val_miou_and_images(trained):
    work_dir, _ = trained
    events = EventAccumulator(str(work_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/lr", "val/mIoU"} <= set(tags["scalars"])
    assert [e.step for e in events.Scalars("val/mIoU")] == [10, 20]
    assert events.Scalars("train/loss")[-1].step == 20
    images = events.Images("val/predictions")
    assert images and images[-1].width == 3 * 64 and images[-1].height == 4 * 64  # image|truth|pred x 4


def test_test_tool_reproduces_last_evaluation(trained, tmp_path):
    work_dir, _ = trained
    show = tmp_path / "show"
    result = run_tool("test", "--config", CONFIG, "--checkpoint", work_dir / "checkpoints/iter_20.pth",
                      "--work-dir", tmp_path, "--show-dir", show, *TINY_SEGMENTATION)
    assert result.returncode == 0, result.stderr
    assert "circle" in result.stdout and "mIoU" in result.stdout  # per-class table and summary
    tested = json.loads((tmp_path / "metrics.json").read_text())
    trained_last = read_metrics(work_dir)[-1]
    assert tested["mIoU"] == pytest.approx(trained_last["mIoU"], abs=1e-6)
    assert tested["aAcc"] == pytest.approx(trained_last["aAcc"], abs=1e-6)
    saved = sorted(show.glob("*.png"))
    assert len(saved) == 16
    assert cv2.imread(str(saved[0])).shape == (64, 3 * 64, 3)


def test_resume_continues_from_latest(trained, tmp_path):
    work_dir, _ = trained
    result = run_tool("train", "--config", CONFIG, "--work-dir", work_dir, "--resume",
                      *TINY_SEGMENTATION, "train.max_iters=30")
    assert result.returncode == 0, result.stderr
    assert "resumed from" in result.stdout and "at iteration 20" in result.stdout
    assert "iter 25/30" in result.stdout and "iter 5/30" not in result.stdout
    assert (work_dir / "checkpoints/latest").read_text() == "iter_30.pth"


def test_quickstart_trains_in_channels_last(trained):
    """The Quickstart sets channels_last: its convolution weights are NHWC (strides survive torch.save)."""
    import torch

    work_dir, _ = trained
    weights = torch.load(work_dir / "checkpoints/iter_20.pth", weights_only=True)["task"]
    kernels = [w for k, w in weights.items() if w.dim() == 4 and w.shape[1] > 1 and w.shape[2] > 1]
    assert kernels and all(w.is_contiguous(memory_format=torch.channels_last) for w in kernels)
    assert not all(w.is_contiguous() for w in kernels)

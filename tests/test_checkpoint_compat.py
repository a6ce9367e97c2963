"""Checkpoints written by an earlier release resume in this one.

tests/data/unet_v0.2.0_iter_2.pth was written by framework 0.2.0 (before the package split that
moved the optimizers, checkpoint, dist and config code) by

    python tools/train.py --config configs/segmentation/unet_shapes.yaml <OVERRIDES below> \
        work_dir=... train.ckpt_interval=2

Resumed here to iteration 4 it must equal a run of this release from scratch, bit for bit:
every part of the old file (networks, optimizer, scheduler, hook and random states) is read
and means what it meant.
"""

import shutil
from pathlib import Path

import torch
from test_resume import assert_same_state

import framework
from support import call_tool

FIXTURE = Path(__file__).parent / "data" / "unet_v0.2.0_iter_2.pth"
OVERRIDES = ["task.model.base_channels=4", "task.model.depth=2", "train.max_iters=4", "train.val_interval=0",
             "train.ckpt_interval=2", "data.train.dataset.num_samples=16", "data.val.dataset.num_samples=4",
             "data.train.num_workers=0", "device=cpu", "amp.enabled=false"]
CONFIG = "configs/segmentation/unet_shapes.yaml"


def test_a_0_2_0_checkpoint_resumes_bit_identical(tmp_path):
    old = tmp_path / "old"
    (old / "checkpoints").mkdir(parents=True)
    shutil.copy(FIXTURE, old / "checkpoints" / "iter_2.pth")
    (old / "checkpoints" / "latest").write_text("iter_2.pth")
    resumed = call_tool("train", "--config", CONFIG, "--work-dir", old, "--resume", *OVERRIDES)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout[-2000:]
    assert "iter_2.pth at iteration 2" in resumed.stdout

    fresh = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "new", *OVERRIDES)
    assert fresh.returncode == 0, fresh.stderr + fresh.stdout[-2000:]

    a, b = (torch.load(d / "checkpoints" / "iter_4.pth", weights_only=True) for d in (old, tmp_path / "new"))
    for part in ("task", "optim", "hooks", "rng"):
        assert_same_state(a[part], b[part], part)
    # the resumed run's checkpoints say which release wrote them, not the release it started under
    assert torch.load(FIXTURE, weights_only=True)["meta"]["framework_version"] == "0.2.0"
    assert a["meta"]["framework_version"] == b["meta"]["framework_version"] == framework.__version__ != "0.2.0"

"""Checkpoints written by an earlier release resume in this one.

tests/data/unet_v0.2.0_iter_2.pth was written by framework 0.2.0 (before the package split that
moved the optimizers, checkpoint, dist and config code) by

    python tools/train.py --config configs/segmentation/unet_shapes.yaml <OVERRIDES below> \
        work_dir=... train.ckpt_interval=2

Resumed here to iteration 4 it must equal a run of this release from scratch (to float rounding:
the file's first iterations ran on another machine's kernels and thread count):
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


def assert_close_state(a, b, where):
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5, msg=lambda m: f"{where}: {m}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_close_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_state(x, y, f"{where}[{i}]")
    else:
        assert_same_state(a, b, where)


def test_a_0_2_0_checkpoint_resumes_like_a_run_of_this_release(tmp_path):
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
    for part in ("hooks", "rng"):  # counters and generator states: equal on any machine
        assert_same_state(a[part], b[part], part)
    # The file's first two iterations ran on the machine that wrote it (2 threads, AVX-512);
    # this machine's fresh run computes them with its own thread count and kernels, so the
    # float state agrees to rounding, not bit for bit. An optimizer state left unread would
    # differ by tens of percent (Adam's moments of 2 steps instead of 4), far past these bounds.
    for part in ("task", "optim"):
        assert_close_state(a[part], b[part], part)
    # the resumed run's checkpoints say which release wrote them, not the release it started under
    assert torch.load(FIXTURE, weights_only=True)["meta"]["framework_version"] == "0.2.0"
    assert a["meta"]["framework_version"] == b["meta"]["framework_version"] == framework.__version__ != "0.2.0"

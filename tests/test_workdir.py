"""A work dir belongs to one run; failures of the file system or of evaluation lose no training."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from framework.checkpoint import files as ckpt
from framework.errors import ConfigError
from framework.runtime.workdir import _refuse_if_locked
from support import REPO, TINY_UNET, call_tool, fork_tool, run_forked_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=4", "train.ckpt_interval=2", "train.val_interval=0",
       "train.log_interval=2"]


def lock_of(pid: int) -> str:
    return json.dumps({"pid": pid, "host": socket.gethostname(), "started": "2026-01-01T00:00:00"})


def test_a_second_run_on_a_busy_work_dir_refuses_and_a_stale_lock_is_taken_over(tmp_path):
    losses = tmp_path / "losses.txt"
    first = fork_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN, "train.max_iters=200",
                      "custom_imports=[probes]", f"hooks=[{{type: LossRecorderHook, path: '{losses}', delay: 0.2}}]",
                      log=tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "wd/checkpoints/latest").exists():  # a checkpoint for --resume below
            assert first.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        second = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN)
        assert second.returncode == 2
        assert f"is in use by another run (pid {first.pid}" in second.stderr
    finally:
        first.kill()
        first.join()
    # the killed run left its lock; its process is gone, so the lock is stale: --resume goes on
    assert (tmp_path / "wd/.lock").is_file()
    resumed = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "removed a stale lock" in resumed.stdout and not (tmp_path / "wd/.lock").exists()
    assert "removed a stale lock" in (tmp_path / "wd/train.log").read_text()  # the run's record says so too


def test_a_lock_held_by_a_live_process_refuses(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "wd").mkdir()
        (tmp_path / "wd/.lock").write_text(lock_of(sleeper.pid))
        result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN)
        assert result.returncode == 2 and f"in use by another run (pid {sleeper.pid}" in result.stderr
        assert sorted(p.name for p in (tmp_path / "wd").iterdir()) == [".lock"]  # nothing else written
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_unwritable_work_dir_or_show_dir_is_one_line_and_a_failure(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "file/wd", *RUN)
    assert result.returncode == 1  # a file-system failure: 1 in every tool
    assert result.stderr.strip() == f"error: {tmp_path / 'file/wd'}: Not a directory"
    trained = tmp_path / "trained"
    assert call_tool("train", "--config", CONFIG, "--work-dir", trained, *RUN).returncode == 0
    result = call_tool("test", "--config", CONFIG, "--checkpoint", trained / "checkpoints/iter_4.pth",
                       "--work-dir", tmp_path / "t", "--show-dir", tmp_path / "file/show", *TINY_UNET)
    assert result.returncode == 1
    assert result.stderr.strip().startswith(f"error: {tmp_path / 'file/show'}") and "Not a directory" in result.stderr


def test_resume_and_overwrite_together_are_refused_before_anything_is_written(tmp_path):
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN, "--resume", "--overwrite")
    assert result.returncode == 2
    assert result.stderr.startswith("error: --resume and --overwrite together:") and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "wd").exists()


def test_a_run_that_never_saved_a_checkpoint_does_not_block_the_next(tmp_path):
    # what a run stopped by a mistake before its first checkpoint leaves: records, no checkpoint
    work_dir = tmp_path / "wd"
    (work_dir / "tensorboard").mkdir(parents=True)
    (work_dir / "tensorboard/events.out.tfevents.1.host").write_bytes(b"old")
    (work_dir / "metrics.jsonl").write_text('{"iter": 2, "mIoU": 0.1}\n')
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN)
    assert result.returncode == 0, result.stderr
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("wd.old-")]
    assert len(aside) == 1 and (aside[0] / "metrics.jsonl").read_text() == '{"iter": 2, "mIoU": 0.1}\n'
    notice = (f"moved metrics.jsonl, tensorboard events of a run without a trained checkpoint in {work_dir} "
              f"to {aside[0]}")
    assert notice in result.stdout and notice in (work_dir / "train.log").read_text()
    assert not (work_dir / "metrics.jsonl").exists()
    assert [p.name for p in (work_dir / "tensorboard").iterdir()] != ["events.out.tfevents.1.host"]


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("leave_kib", [0, 16], ids=["full_before_the_write", "full_during_the_write"])
def test_disk_full_is_one_line_naming_the_file_and_keeps_the_previous_checkpoint(small_disk, leave_kib):
    # With 16 KiB left torch's zip writer fails part-way through and raises a RuntimeError about
    # file positions: the real cause (ENOSPC from the installed torch's write) must reach the user
    work_dir = small_disk / "wd"
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "custom_imports=[probes]",
                             f"hooks=[{{type: FillDiskHook, iteration: 4, leave_kib: {leave_kib}}}]",
                             folder=small_disk.parent / "out")
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == f"error: {work_dir / 'checkpoints/iter_4.pth'}: No space left on device"
    (work_dir / "filler").unlink()
    assert ckpt.read_latest(work_dir / "checkpoints").name == "iter_2.pth"
    assert ckpt.load_checkpoint(work_dir / "checkpoints/iter_2.pth")["meta"]["iter"] == 2
    assert not any(p.name.startswith("iter_4") for p in (work_dir / "checkpoints").iterdir())


def test_a_failed_evaluation_keeps_the_iterations_training(tmp_path):
    val = tmp_path / "val"
    (val / "images").mkdir(parents=True)
    (val / "masks").mkdir()
    for name in ("a", "b"):
        assert cv2.imwrite(str(val / "images" / f"{name}.png"), np.zeros((32, 32, 3), np.uint8))
        assert cv2.imwrite(str(val / "masks" / f"{name}.png"), np.zeros((32, 32), np.uint8))
    (val / "images" / "b.png").write_bytes(b"not a png")  # found at start-up, unreadable when read
    # (with the default cache: auto it is read, and refused, when the loader is built; this test is
    # about an evaluation that fails mid-run, so the validation set is read at evaluation time)
    dataset = (f"data.val.dataset={{type: ImageMaskFolder, root: '{val}', "
               "classes: [background, circle, square, triangle]}")
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "wd", *RUN, "train.val_interval=3",
                       "train.ckpt_interval=4", "data.val.num_workers=0", "+data.val.cache=null", dataset)
    assert result.returncode == 2
    assert "evaluation at iteration 3 failed:" in result.stderr and "b.png" in result.stderr
    state = ckpt.load_checkpoint(tmp_path / "wd/checkpoints/iter_3.pth")
    assert state["meta"]["iter"] == 3
    assert all(torch.isfinite(v).all() for v in state["task"].values() if v.is_floating_point())
    assert "continue with --resume" in result.stdout
    assert os.path.exists(tmp_path / "wd/checkpoints/latest")


def another_users_process() -> int:
    """pid 1 (owned by root in a container or a VM)."""
    return 1


def _check_lock_as_nobody(work_dir: str, answer) -> None:
    """In a forked child: become `nobody`, then check the lock; write what happened to `answer`."""
    try:
        if os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        try:
            os.kill(another_users_process(), 0)
            answer.write("precondition: signalling pid 1 was allowed")
            return
        except PermissionError:
            pass
        try:
            _refuse_if_locked(Path(work_dir))
            answer.write("free")
        except ConfigError as err:
            answer.write(f"refused: {err}")
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which fails the test
        answer.write(f"error: {err!r}")


def test_a_lock_held_by_another_users_live_process_refuses():
    """os.kill(pid, 0) raises PermissionError for a live process of another user: that process
    is alive, and the folder is busy. Tests usually run as root (which may signal anything), so
    the check runs in a forked child that dropped to the `nobody` user."""
    if os.geteuid() != 0 and os.stat("/proc/1").st_uid == os.geteuid():
        pytest.skip("pid 1 is ours and we cannot change user")
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)  # readable by nobody (pytest's tmp_path is not)
        work_dir = Path(folder) / "wd"
        work_dir.mkdir()
        (work_dir / ".lock").write_text(lock_of(another_users_process()))
        os.chmod(work_dir / ".lock", 0o644)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read)
            with os.fdopen(write, "w") as answer:
                _check_lock_as_nobody(str(work_dir), answer)
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            said = answer.read()
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert said.startswith("refused: work dir") and "is in use by another run (pid 1," in said, said


def test_an_unknown_hook_or_metric_name_is_refused_before_anything_is_written(tmp_path):
    for mistake, message in [
        ("hooks=[{type: NoSuchHook}]", "hooks[0]"),
        ("train.best_metric=mIOU", "train.best_metric: 'mIOU' is not a metric of this run (have: mIoU, mAcc, aAcc; "
                                   "per class e.g. IoU.background); did you mean 'mIoU'?"),
        ("hooks=[{type: EarlyStoppingHook, monitor: aacc, rule: greater}]",
         "hooks[0].monitor: 'aacc' is not a metric of this run (have: mIoU, mAcc, aAcc; per class e.g. "
         "IoU.background); did you mean 'aAcc', 'mAcc'?"),
    ]:
        work_dir = tmp_path / "wd"
        result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, mistake)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert sorted(p.name for p in work_dir.iterdir()) == ["train.log"]  # no events, config or records
        work_dir.rename(tmp_path / f"failed-{len(list(tmp_path.iterdir()))}")


METRIC_WITHOUT_NAMES = """
import torch
from framework.metrics.base import Metric
from framework.registry import METRICS

@METRICS.register()
class ScoreOfOne(Metric):  # a custom metric that does not say its names in advance
    def update(self, outputs):
        pass

    def compute(self):
        return {"score": 1.0}
"""


def test_a_best_metric_found_wrong_at_the_first_evaluation_keeps_that_iterations_checkpoint(tmp_path):
    (tmp_path / "score_of_one_metric.py").write_text(METRIC_WITHOUT_NAMES)
    work_dir = tmp_path / "wd"
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "train.val_interval=3",
                       "train.ckpt_interval=4", f"custom_imports=['{tmp_path / 'score_of_one_metric.py'}']",
                       "metrics=[{type: ScoreOfOne}]", "train.best_metric=mIoU")
    assert result.returncode == 2
    assert "train.best_metric: 'mIoU' is not a metric of this run (have: score)" in result.stderr
    assert ckpt.read_latest(work_dir / "checkpoints").name == "iter_3.pth"
    assert ckpt.load_checkpoint(work_dir / "checkpoints/iter_3.pth")["meta"]["iter"] == 3
    resumed = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "train.val_interval=3",
                        "train.ckpt_interval=4", f"custom_imports=['{tmp_path / 'score_of_one_metric.py'}']",
                        "metrics=[{type: ScoreOfOne}]", "train.best_metric=score", "train.best_mode=max",
                        "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout


def test_a_channel_mismatch_leaves_no_run_and_the_corrected_command_goes_ahead(tmp_path):
    """Issue 42: the network's 4 input channels against the data's 3, found at start-up (the first
    step's forward, framework/engine/startup_check.py; before it, by the evaluation at iteration 0).
    Nothing is trained, so nothing is saved and --resume is not suggested; the corrected command starts. A folder where framework 0.2 left the
    untrained start (iter_0.pth) behind is no run either: --resume says so before anything is
    written, and the corrected command moves it aside and goes ahead."""
    work_dir = tmp_path / "wd"
    run = [*RUN, "train.val_at_start=true", "data.val.num_workers=0"]
    failed = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *run, "task.model.in_channels=4")
    assert failed.returncode == 2
    assert "error: task.model.in_channels: model takes 4 channels but is given 3" in failed.stderr
    assert "--resume" not in failed.stdout + failed.stderr
    assert not (work_dir / "checkpoints").exists()
    corrected = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *run)
    assert corrected.returncode == 0, corrected.stderr
    assert ckpt.read_latest(work_dir / "checkpoints").name == "iter_4.pth"

    left_by_0_2 = tmp_path / "left"
    untrained = ckpt.load_checkpoint(work_dir / "checkpoints/iter_2.pth")
    ckpt.save_checkpoint({**untrained, "meta": {**untrained["meta"], "iter": 0}}, left_by_0_2 / "checkpoints/iter_0.pth")
    ckpt.write_latest(left_by_0_2 / "checkpoints", "iter_0.pth")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    resumed = call_tool("train", "--config", CONFIG, "--work-dir", left_by_0_2, *run, "--resume")
    assert resumed.returncode == 2
    assert resumed.stderr.strip().splitlines()[-1] == (
        f"error: --resume: {left_by_0_2 / 'checkpoints/iter_0.pth'} is the untrained start (saved before the "
        "first iteration), nothing to continue: train without --resume")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written or moved
    rerun = call_tool("train", "--config", CONFIG, "--work-dir", left_by_0_2, *run)
    assert rerun.returncode == 0, rerun.stderr
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("left.old-")]
    assert len(aside) == 1 and ckpt.read_latest(aside[0] / "checkpoints").name == "iter_0.pth"
    assert (f"moved checkpoints/iter_0.pth (the untrained start) of a run without a trained checkpoint in "
            f"{left_by_0_2} to {aside[0]}") in rerun.stdout
    assert ckpt.read_latest(left_by_0_2 / "checkpoints").name == "iter_4.pth"

"""Checkpoint files: what they hold, crash-safe writes, falling back past a damaged one,
auto_resume, and refusing files whose loading would run code."""

import os
import pickle
import shutil
import signal
import time

import pytest
import torch
import yaml

import probes
from framework.checkpoint import files as ckpt
from support import REPO, TINY_UNET, call_tool, fork, run_forked_tool, train_run

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "train.max_iters=6", "train.ckpt_interval=2", "train.val_interval=0", "train.log_interval=2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("trained"), CONFIG, *RUN, runner=run_forked_tool)


@pytest.fixture
def copy_of_trained(trained, tmp_path):
    return shutil.copytree(trained, tmp_path / "run")


def assert_one_clear_line(result, *needles):
    assert result.returncode == 2, result.stderr + result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_checkpoint_holds_counters_config_overrides_versions_and_rng(trained):
    folder = trained / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["iter_2.pth", "iter_4.pth", "iter_6.pth", "latest"]
    state = ckpt.load_checkpoint(folder / "iter_4.pth")
    meta = state["meta"]
    assert (meta["iter"], meta["epoch"], meta["batches_in_epoch"]) == (4, 0, 4)
    assert meta["overrides"] == RUN
    assert yaml.safe_load(meta["config"])["train"]["max_iters"] == 6
    assert meta["framework_version"] and meta["torch_version"] == str(torch.__version__)
    assert set(state["rng"]) == {0} and {"python", "numpy", "torch"} <= set(state["rng"][0])
    assert set(state["optim"]["optimizers"]) == set(state["optim"]["schedulers"]) == {"main"}
    assert state["optim"]["schedulers"]["main"]["last_epoch"] == 4
    assert any(k.startswith("model.") for k in state["task"])


def test_killed_mid_write_leaves_previous_checkpoint_and_no_partial_final_file(tmp_path):
    folder = tmp_path / "checkpoints"
    ckpt.save_checkpoint({"weights": torch.ones(4)}, folder / "iter_2.pth")
    ckpt.write_latest(folder, "iter_2.pth")
    ready = tmp_path / "halfway"
    writer = fork(probes.stall_checkpoint_write, str(folder / "iter_4.pth"), str(ready))
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert writer.is_alive() and time.monotonic() < deadline, "the writer never got halfway"
        time.sleep(0.01)
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(30)

    assert not (folder / "iter_4.pth").exists()
    assert ckpt.read_latest(folder) == folder / "iter_2.pth"
    assert torch.equal(ckpt.read_weights_file(folder / "iter_2.pth")["weights"], torch.ones(4))
    leftovers = [p for p in folder.iterdir() if p.name not in ("iter_2.pth", "latest")]
    assert [p.name for p in leftovers] == [f".iter_4.pth.tmp-{writer.pid}"]  # never at a final path
    assert ckpt.remove_stale_temp_files(folder) == leftovers
    assert sorted(p.name for p in folder.iterdir()) == ["iter_2.pth", "latest"]


def test_resume_falls_back_past_a_truncated_latest_checkpoint(copy_of_trained):
    latest = copy_of_trained / "checkpoints/iter_6.pth"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, "--resume", *RUN,
                             "train.max_iters=8", folder=copy_of_trained / "out2")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    assert f"skipping unreadable checkpoint: cannot load {latest}" in result.stdout
    assert "resumed from" in result.stdout and "iter_4.pth at iteration 4" in result.stdout
    assert (copy_of_trained / "checkpoints/latest").read_text() == "iter_8.pth"


def test_resuming_with_a_larger_max_iters_extends_the_schedule(copy_of_trained, tmp_path):
    # the checkpoint's WarmupPolyLR ends at 6 (lr 0 from there): resumed to 10, the learning
    # rates are those of a run configured with 10 iterations from the start
    result = call_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, *RUN, "train.max_iters=10",
                       "--resume")
    assert result.returncode == 0, result.stderr
    assert "schedule WarmupPolyLR stretched from max_iters 6 to 10" in result.stdout
    fresh = train_run(tmp_path / "fresh", CONFIG, *RUN, "train.max_iters=10")
    for it in (8, 10):  # (iter_6.pth is the checkpoint resumed from)
        resumed_lr = ckpt.load_checkpoint(copy_of_trained / f"checkpoints/iter_{it}.pth")["optim"]["optimizers"]
        fresh_lr = ckpt.load_checkpoint(fresh / f"checkpoints/iter_{it}.pth")["optim"]["optimizers"]
        if it < 10:
            assert resumed_lr["main"]["param_groups"][0]["lr"] > 0
        assert resumed_lr["main"]["param_groups"][0]["lr"] == fresh_lr["main"]["param_groups"][0]["lr"]


def test_retention_after_resuming_an_older_checkpoint_keeps_the_new_ones(copy_of_trained):
    # resumed from iter_2 with keep_last=1: the new iter_4 is this run's; the old iter_6 belongs
    # to the abandoned trajectory and must be the one deleted (latest must name a file that exists)
    folder = copy_of_trained / "checkpoints"
    result = call_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, *RUN, "train.max_iters=5",
                       "train.keep_last=1", "train.ckpt_interval=4", "--resume", folder / "iter_2.pth")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["iter_5.pth", "latest"]
    state = ckpt.load_checkpoint(folder / "iter_5.pth")
    assert state["meta"]["iter"] == 5 and ckpt.read_latest(folder) == folder / "iter_5.pth"


def test_resuming_a_checkpoint_of_another_model_is_one_clear_error(trained, tmp_path):
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *RUN, "task.model.base_channels=16",
                       "--resume", trained / "checkpoints/iter_4.pth")
    assert_one_clear_line(result, "iter_4.pth does not fit this config's task/optimizers", "size mismatch")


@pytest.mark.parametrize("setting, env", [("auto_resume=true", {}), ("auto_resume=auto", {"TORCHELASTIC_RESTART_COUNT": "1"})])
def test_auto_resume_continues_from_the_latest_checkpoint(copy_of_trained, setting, env):
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, *RUN, "train.max_iters=8",
                             setting, env=env, folder=copy_of_trained / "out2")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    assert "iter_6.pth at iteration 6" in result.stdout
    assert "differs from the checkpoint's: train.max_iters: 6 -> 8" in result.stdout


def test_a_new_run_into_a_work_dir_holding_one_is_refused_or_moves_it_aside(copy_of_trained):
    # auto_resume=auto resumes only a torchrun restart: a first launch is a new run, which must
    # not mix into the old one (best.pth, retention, latest, metrics.jsonl, TensorBoard)
    before = {p.name: p.read_bytes() for p in (copy_of_trained / "checkpoints").iterdir()}
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, *RUN, "train.max_iters=2",
                             folder=copy_of_trained.parent / "out2")
    assert_one_clear_line(result, f"work dir {copy_of_trained} holds a run (iter_2.pth", "--resume", "--overwrite")
    assert {p.name: p.read_bytes() for p in (copy_of_trained / "checkpoints").iterdir()} == before

    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, *RUN, "train.max_iters=2",
                             "--overwrite", folder=copy_of_trained.parent / "out3")
    assert result.returncode == 0, result.stderr
    assert "resumed" not in result.stdout and "iter 2/2" in result.stdout
    aside = [p for p in copy_of_trained.parent.iterdir() if p.name.startswith(f"{copy_of_trained.name}.old-")]
    assert len(aside) == 1
    assert {p.name: p.read_bytes() for p in (aside[0] / "checkpoints").iterdir()} == before
    assert sorted(p.name for p in (copy_of_trained / "checkpoints").iterdir()) == ["iter_2.pth", "latest"]


class CreatesFile:
    """Unpickling this opens (creates) a file: what a malicious checkpoint could do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


class RunsShellCommand:
    """Unpickling this runs a shell command (os.system: `posix.system`, a module torch blocks)."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


@pytest.fixture
def malicious_files(tmp_path):
    marker = tmp_path / "created_by_unpickling"
    as_torch_save = tmp_path / "evil.pth"
    torch.save({"meta": {}, "task": {"x": CreatesFile(marker)}, "optim": {}, "rng": {}}, as_torch_save)
    as_plain_pickle = tmp_path / "evil.pt"
    as_plain_pickle.write_bytes(pickle.dumps({"weight": CreatesFile(marker)}, protocol=2))
    return marker, [as_torch_save, as_plain_pickle]


def test_unsafe_pickles_are_refused_and_never_run(tmp_path, malicious_files):
    marker, files = malicious_files
    work_dir = tmp_path / "run"
    for evil in files:
        for how in (["--resume", evil], [f"load_from={evil}"], [f"+task.model.init={evil}"]):
            result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, *how)
            assert_one_clear_line(result, f"refused to load {evil}", "io.open")
    # The latest checkpoint of the work dir replaced by one: refused too, no falling back past it.
    (work_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(files[0], work_dir / "checkpoints/iter_9.pth")
    ckpt.write_latest(work_dir / "checkpoints", "iter_9.pth")
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, "--resume", *RUN)
    assert_one_clear_line(result, "refused to load", "iter_9.pth")
    assert not marker.exists()


def test_a_blocked_module_is_named_and_resume_never_falls_back_past_it(copy_of_trained, tmp_path):
    # torch words the refusal of a blocked module (posix) differently from an unknown global:
    # the decision reads the file's pickle, not torch's message
    marker = tmp_path / "created_by_unpickling"
    folder = copy_of_trained / "checkpoints"
    state = ckpt.load_checkpoint(folder / "iter_6.pth")
    state["meta"]["note"] = RunsShellCommand(f"touch {marker}")
    torch.save(state, folder / "iter_8.pth")
    ckpt.write_latest(folder, "iter_8.pth")
    result = call_tool("train", "--config", CONFIG, "--work-dir", copy_of_trained, "--resume", *RUN,
                       "train.max_iters=10")
    assert_one_clear_line(result, f"refused to load {folder / 'iter_8.pth'}: it holds pickled objects (posix.system)")
    assert "resumed" not in result.stdout and not marker.exists()
    assert not (folder / "iter_10.pth").exists()
